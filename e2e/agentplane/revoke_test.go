package agentplane

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/quic-go/quic-go"
)

// TestRevokedIdentity revokes the identity of a connected node, as metal.revokeIdentity
// does: the revocation's commit ends its session with CloseRevoked, and a new session
// with the same, still unexpired, certificate is refused the same way and never
// registered.
func TestRevokedIdentity(t *testing.T) {
	e := newEnv(t, agents.Config{})
	storetest.Fill(t, e.st)
	node := storetest.Node(t, e.st, store.Node{MACs: []string{"52:54:00:00:00:01"}}).ID
	live := helloOverQUIC(t, e, node)
	waitFor(t, "the session", func() bool { return e.ep.Sessions() == 1 })

	err := e.st.Update(func(tx *store.Tx) error {
		_, err := tx.UpdateNode(node, func(n *store.Node) error { n.IdentityRevokedAt = tx.Now(); return nil })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	closedRevoked(t, live)
	if n := e.ep.Sessions(); n != 0 {
		t.Errorf("%d sessions after the revocation", n)
	}

	again := helloOverQUIC(t, e, node)
	closedRevoked(t, again)
	if n := e.ep.Sessions(); n != 0 {
		t.Errorf("%d sessions after a revoked node's hello", n)
	}
}

// closedRevoked waits for conn to be closed and checks that the registry closed it with
// CloseRevoked.
func closedRevoked(t *testing.T, conn *quic.Conn) {
	t.Helper()
	select {
	case <-conn.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the session was not closed")
	}
	cause := context.Cause(conn.Context())
	ae, ok := errors.AsType[*quic.ApplicationError](cause)
	if !ok || !ae.Remote || proto.CloseCode(ae.ErrorCode) != proto.CloseRevoked {
		t.Fatalf("closed with %v, want CloseRevoked from the registry", cause)
	}
}
