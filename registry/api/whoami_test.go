package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestWhoamiThroughTheHandlerClient: a credential holding no action at all reads its own
// record through the in-process client, never its secret; an unknown secret and a revoked
// credential are UNAUTHENTICATED through it as over the network.
func TestWhoamiThroughTheHandlerClient(t *testing.T) {
	st, s := serve(t)
	var cred store.Credential
	var secret string
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if _, err = tx.CreateTenant("acme"); err != nil {
			return err
		}
		cred, secret, err = tx.CreateCredential("acme", []string{ActionImagesRead}, expires)
		return err
	})
	var who Credential
	if err := NewHandlerClient(s, secret).Call(context.Background(), "credentials.whoami", struct{}{}, &who); err != nil {
		t.Fatal(err)
	}
	if who.ID != cred.ID || who.TenantID != "acme" || !who.ExpiresAt.Equal(expires) || len(who.Actions) != 1 {
		t.Errorf("whoami %+v", who)
	}
	var raw map[string]any
	NewHandlerClient(s, secret).Call(context.Background(), "credentials.whoami", struct{}{}, &raw)
	for k, v := range raw {
		if s, ok := v.(string); ok && strings.Contains(s, secret) {
			t.Errorf("whoami shows the secret in %s", k)
		}
	}
	if err := NewHandlerClient(s, "bc_unknown").Call(context.Background(), "credentials.whoami", struct{}{}, &who); proto.CodeOf(err) != proto.Unauthenticated {
		t.Errorf("an unknown secret: %v", err)
	}
	storetest.Update(t, st, func(tx *store.Tx) error { _, err := tx.RevokeCredential(cred.ID); return err })
	if err := NewHandlerClient(s, secret).Call(context.Background(), "credentials.whoami", struct{}{}, &who); proto.CodeOf(err) != proto.Unauthenticated {
		t.Errorf("a revoked credential: %v", err)
	}
}
