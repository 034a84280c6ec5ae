package metal

import (
	"encoding/json"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/google/go-cmp/cmp"
)

// TestMIGLayoutFromPool: a mig-layout unit with from: "pool" reaches the node's host
// section and NodeSpec as the pool's policy.migLayout (its when kept, no from); a pool
// without one refuses the deploy before anything runs; a malformed policy.migLayout is
// INVALID_INPUT at its path.
func TestMIGLayoutFromPool(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	if _, err := h.deploy(node, "testdata/mig-from-pool.json"); proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "profile" {
		t.Fatalf("a deploy of from: pool on a pool without policy.migLayout: %v", err)
	}
	if n := h.node(node); n.State != store.NodeReady {
		t.Fatalf("the refused deploy left the node %s", n.State)
	}
	bad := store.PoolPolicy{MIGLayout: json.RawMessage(`{"all":["5g.40gb"]}`)}
	if e := proto.AsError(h.svc.CheckPoolPolicy(bad)); e == nil || e.Code != proto.InvalidInput || e.Details.Path != "policy.migLayout.all[0]" {
		t.Errorf("a malformed policy.migLayout: %v", e)
	}
	policy := store.PoolPolicy{HardwareProfile: "gpu-redfish", MIGLayout: json.RawMessage(`{"all":["3g.40gb","3g.40gb"],"1":[]}`)}
	if err := h.svc.CheckPoolPolicy(policy); err != nil {
		t.Fatal(err)
	}
	h.setPolicy(policy)
	run, err := h.deploy(node, "testdata/mig-from-pool.json")
	if err != nil {
		t.Fatal(err)
	}
	run, n := h.end(run.ID)
	if run.State != store.RunSucceeded {
		t.Fatalf("run %s: %+v", run.State, n.Failure)
	}
	want := []store.HostUnit{{Unit: "mig-layout", Settings: json.RawMessage(`{"layout":{"all":["3g.40gb","3g.40gb"],"1":[]},"when":"nvswitch"}`)}}
	if diff := cmp.Diff(want, n.Host, cmp.Transformer("json", rawString)); diff != "" {
		t.Errorf("host section (-want +got):\n%s", diff)
	}
	var spec proto.NodeSpec
	h.store.View(func(tx *store.Tx) (err error) { spec, err = tx.NodeSpec(node); return err })
	if len(spec.Host) != 1 || string(spec.Host[0].Settings) != string(want[0].Settings) {
		t.Errorf("NodeSpec host %+v", spec.Host)
	}
	if problems := hostunit.Validate(hostunit.UnitMIGLayout, n.Host[0].Settings); len(problems) > 0 {
		t.Errorf("bcd would refuse the resolved unit: %+v", problems)
	}
}
