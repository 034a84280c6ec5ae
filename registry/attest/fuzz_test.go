package attest_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/testkit"
)

// FuzzReceived feeds the registry's reading of a wipe result whatever an agent may
// answer: it never panics, always stores a wipe record, and never attests a result no key
// the agent CA certified for node-1 signed.
func FuzzReceived(f *testing.F) {
	ca, err := testkit.NewCA()
	if err != nil {
		f.Fatal(err)
	}
	c, err := ca.AgentCertificate("node-1", "ramdisk")
	if err != nil {
		f.Fatal(err)
	}
	a := fromTLS(f, c)
	stranger, _ := testkit.NewCA()
	other, _ := stranger.AgentCertificate("node-1", "ramdisk")
	o := fromTLS(f, other)
	f.Add([]byte(`{"attested":true}`))
	f.Add([]byte(`{"payload":"e30=","algorithm":"ed25519","signature":""}`))
	f.Add([]byte(sign(f, o, "node-1", wipeCmd.ID, goodWipe)))
	v := attest.Verifier{AgentCAs: ca.Pool()}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		res := v.Received("node-1", proto.RoleRamdisk, a.cert, wipeCmd, time.Time{}, proto.Result{ID: wipeCmd.ID, Result: raw})
		var w attest.Wipe
		if res.Error != nil || json.Unmarshal(res.Result, &w) != nil {
			t.Fatalf("stored %+v", res)
		}
		if w.Attested {
			t.Fatalf("attested an answer no agent key of node-1 signed: %s", raw)
		}
	})
}
