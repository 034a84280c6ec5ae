package api

import (
	"context"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestCredentialPagesTellNothingOfAnotherTenant: credentials.list reads the credentials
// of every tenant in id order and keeps the caller's. Beta, whose one credential is its
// whole list, pages it one at a time: the page is its credential and the end of the list
// whether or not acme holds a credential whose id sorts after it. Before, a page that
// ended on beta's last credential offered a next page (empty) when any other tenant's
// credential sorted after it, so beta could tell, from the ids of credentials it made, of
// credentials of other tenants.
func TestCredentialPagesTellNothingOfAnotherTenant(t *testing.T) {
	st, s := serve(t)
	var secret string
	var own store.Credential
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		for _, tn := range []string{store.RootTenant, "acme", "beta"} {
			if _, err := tx.CreateTenant(tn); err != nil {
				return err
			}
		}
		own, secret, err = tx.CreateCredential("beta", []string{ActionCredentialsManage}, time.Time{})
		return err
	})
	beta := NewHandlerClient(s, secret)
	page := func() CredentialList {
		t.Helper()
		var out CredentialList
		if err := beta.Call(context.Background(), "credentials.list", ListCredentialsRequest{ListRequest: ListRequest{Limit: 1}}, &out); err != nil {
			t.Fatal(err)
		}
		if len(out.Credentials) != 1 || out.Credentials[0].ID != own.ID {
			t.Fatalf("beta's page: %+v", out.Credentials)
		}
		return out
	}
	if alone := page(); alone.NextCursor != "" {
		t.Fatalf("beta alone is offered a next page: %q", alone.NextCursor)
	}
	// Acme makes credentials until one sorts after beta's (each does with a chance of
	// what is left above beta's id).
	storetest.Update(t, st, func(tx *store.Tx) error {
		for {
			c, _, err := tx.CreateCredential("acme", []string{ActionNodesRead}, time.Time{})
			if err != nil || c.ID > own.ID {
				return err
			}
		}
	})
	if beside := page(); beside.NextCursor != "" {
		t.Errorf("beta's page tells of a credential of acme's after its own: next cursor %q", beside.NextCursor)
	}
}
