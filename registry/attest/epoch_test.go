package attest_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestSignedResultOfAnEarlierCertificate: the ramdisk of a machine's earlier
// installation signed a wipe with its key (kept after its epoch moved), and the wipe
// reaches the registry on a session of the current installation's certificate, carrying
// the earlier certificate (a result carries the certificate it was signed with when the
// agent renewed while the command ran). It is not attested: the carried certificate is
// checked against the node as the store holds it (store.Tx.CheckAgent), FORBIDDEN,
// earlier-installation, as it is when it is the session's own. The same wipe signed with
// the current certificate is attested.
func TestSignedResultOfAnEarlierCertificate(t *testing.T) {
	keys, err := pki.LoadOrCreate(t.TempDir(), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.Filled(t, store.Options{})
	node := storetest.Node(t, st, store.Node{MACs: []string{"52:54:00:00:0b:01"}}).ID
	// The workflow that boots the ramdisk runs: its certificate is taken while it does.
	var run store.Run
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if run, err = tx.CreateRun(store.Run{Kind: "release", Node: node, Tenant: storetest.Tenant, Document: json.RawMessage(`{}`),
			Steps: []store.RunStep{{Phase: "main"}}}); err != nil {
			return err
		}
		_, err = tx.UpdateNode(node, func(n *store.Node) error { n.Workflow = run.ID; return nil })
		return err
	})
	issue := func(epoch int64) agentKey {
		t.Helper()
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := keys.IssueAgentCertificate(proto.AgentCredential{Node: node, Role: proto.RoleRamdisk, Epoch: epoch, Run: run.ID}, key.Public())
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return agentKey{cert, key}
	}
	earlier := issue(0)
	storetest.Update(t, st, func(tx *store.Tx) error {
		_, err := tx.UpdateNode(node, func(n *store.Node) error { n.NewIdentityEpoch(tx.Now()); return nil })
		return err
	})
	current := issue(1)
	v := attest.Verifier{AgentCAs: keys.AgentCAPool(), Current: func(c proto.AgentCredential) error {
		return st.View(func(tx *store.Tx) error { return tx.CheckAgent(c) })
	}}
	cmd := wipeCmd
	stored := func(peer *x509.Certificate, by agentKey) attest.Wipe {
		t.Helper()
		res := v.Received(node, proto.RoleRamdisk, peer, cmd, time.Time{}, proto.Result{ID: cmd.ID, Result: sign(t, by, node, cmd.ID, goodWipe)})
		var w attest.Wipe
		if res.Error != nil || json.Unmarshal(res.Result, &w) != nil {
			t.Fatalf("stored %+v", res)
		}
		return w
	}
	for name, peer := range map[string]*x509.Certificate{"carried on the current session": current.cert, "the session's own": earlier.cert} {
		if w := stored(peer, earlier); w.Attested || len(w.Disks) != 0 || !strings.Contains(w.Reason, "earlier installation") {
			t.Errorf("a wipe signed with the earlier certificate, %s: %+v; want it not attested, as of an earlier installation", name, w)
		}
	}
	if w := stored(current.cert, current); !w.Attested {
		t.Errorf("the wipe signed with the current certificate: %+v, want it attested", w)
	}
}
