package api

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestListsPageAlike: every list reached through listPage answers an empty page as []
// (never null), refuses a limit beyond the largest page as INVALID_INPUT at limit, and
// the root-only lists answer another tenant's credential FORBIDDEN.
func TestListsPageAlike(t *testing.T) {
	st := storetest.Open(t, store.Options{})
	s := NewServer(st, slog.New(slog.DiscardHandler))
	s.RegisterAll()
	actions := []string{ActionTenantsManage, ActionSitesManage, ActionTokensManage}
	var root, acme string
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		for _, tenant := range []string{store.RootTenant, "acme"} {
			if _, err = tx.CreateTenant(tenant); err != nil {
				return err
			}
		}
		if _, root, err = tx.CreateCredential(store.RootTenant, actions, time.Now().Add(time.Hour)); err != nil {
			return err
		}
		_, acme, err = tx.CreateCredential("acme", actions, time.Now().Add(time.Hour))
		return err
	})
	lists := map[string]struct {
		h        http.Handler
		key      string
		rootOnly bool
	}{
		"sites.list":   {s, "sites", true},
		"tokens.list":  {s, "tokens", true},
		"signers.list": {s.HostHandler(), "signers", false},
	}
	for method, l := range lists {
		t.Run(method, func(t *testing.T) {
			c := NewHandlerClient(l.h, root)
			var got map[string]any
			if err := c.Call(context.Background(), method, struct{}{}, &got); err != nil {
				t.Fatal(err)
			}
			if items, ok := got[l.key].([]any); !ok || len(items) != 0 {
				t.Errorf("an empty page: %s is %#v, want []", l.key, got[l.key])
			}
			err := c.Call(context.Background(), method, map[string]int{"limit": store.MaxPage + 1}, &got)
			if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "limit" {
				t.Errorf("a limit beyond the largest page: %v, want INVALID_INPUT at limit", err)
			}
			if l.rootOnly {
				if err := NewHandlerClient(l.h, acme).Call(context.Background(), method, struct{}{}, &got); proto.CodeOf(err) != proto.Forbidden {
					t.Errorf("another tenant's credential: %v, want FORBIDDEN", err)
				}
			}
		})
	}
	var tenants TenantList
	if err := NewHandlerClient(s, root).Call(context.Background(), "tenants.list", struct{}{}, &tenants); err != nil || len(tenants.Tenants) == 0 {
		t.Errorf("tenants.list: %+v, %v", tenants, err)
	}
	if err := NewHandlerClient(s, root).Call(context.Background(), "tenants.list", map[string]int{"limit": store.MaxPage + 1}, &tenants); proto.CodeOf(err) != proto.InvalidInput {
		t.Errorf("tenants.list beyond the largest page: %v, want INVALID_INPUT", err)
	}
	if err := NewHandlerClient(s, acme).Call(context.Background(), "tenants.list", struct{}{}, &tenants); proto.CodeOf(err) != proto.Forbidden {
		t.Errorf("tenants.list by another tenant: %v, want FORBIDDEN", err)
	}
}
