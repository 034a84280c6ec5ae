package registry

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestAJoinRequestSentAgainCutsNothingOff: a node's installed OS joins from 127.0.0.1
// with a provisioned token, and whoever saw that join's request (its body: the sealed
// token, the agent's public key) sends it again, byte for byte, from 127.0.0.2. The
// sealed token opens only beside the key the join certified, so the sender holds neither
// the token's secret nor the key's: it is answered as the join was, a certificate that
// only the agent holding the key can use, and the agent that joined keeps the node's
// identity. Once the node's identity epoch moved (its agents revoked), the request sent
// again is refused token-used and moves nothing. Before, the registry took it for the
// token presented again by another host and contained the node: its identity epoch
// moved, cutting off the agent that joined, with no secret at all.
func TestAJoinRequestSentAgainCutsNothingOff(t *testing.T) {
	f := serveBusy(t, Config{})
	f.populate()
	n := storetest.Node(t, f.r.st, store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:0d:01"}, State: store.NodeReady})
	url := f.r.Info().URL
	body, err := joinRequest(url, n.ID, "node", f.mint(store.TokenProvisioned, n.ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := postJoin(url, "127.0.0.1", body); err != nil {
		t.Fatalf("the installed OS's join: %v", err)
	}
	epoch := epochOf(t, f, n.ID)

	if err := postJoin(url, "127.0.0.2", body); err != nil {
		t.Errorf("the join's request sent again from 127.0.0.2: %v, want it answered again", err)
	}
	if after := epochOf(t, f, n.ID); after != epoch {
		t.Fatalf("the node's identity epoch went from %d to %d after its join's request was sent again: the agent that joined was cut off", epoch, after)
	}
	if err := f.r.st.View(func(tx *store.Tx) error {
		return tx.CheckAgent(proto.AgentCredential{Node: n.ID, Role: proto.RoleNode, Epoch: epoch})
	}); err != nil {
		t.Errorf("the certificate of the agent that joined: %v", err)
	}

	if _, err := call[api.CertificatesRevoked](f.tenants["acme"], "metal.revokeCertificates", api.RevokeNodeCertificatesRequest{NodeID: n.ID, Reason: "rotating"}); err != nil {
		t.Fatal(err)
	}
	err = postJoin(url, "127.0.0.2", body)
	if e := proto.AsError(err); e.Code != proto.Unauthenticated || e.Details.Reason != proto.ReasonTokenUsed {
		t.Errorf("the join's request sent again after the revocation: %v, want UNAUTHENTICATED %s", err, proto.ReasonTokenUsed)
	}
	if after := epochOf(t, f, n.ID); after != epoch+1 {
		t.Errorf("the node's identity epoch is %d after the revocation and the join's request sent again, want %d", after, epoch+1)
	}
}
