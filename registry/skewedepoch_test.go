package registry

import (
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// replicaSkew is how far behind the other replica's clock is in TestCutOffAcrossSkewedClocks:
// well past the few calls between an epoch's move on one replica and a workflow's start on
// the other, well within a run claim's and a lease's lifetime (30s), which the replicas
// read on each other's clocks too.
const replicaSkew = 20 * time.Second

// TestCutOffAcrossSkewedClocks: two registries share one etcd store (a real three-member
// cluster), the second's clock 20 seconds behind the first's. An operator revokes a
// node's agents through the first (its identity epoch moves, at the first's time), then
// inspects the node through the second: the inspect is created just after the move, at
// the second's earlier time, and runs at the new epoch (its relay to the rack's agent,
// absent here, waits). A second revocation through the first cuts that inspect off and
// fails it at once (the answer's failedWorkflowId names it), whichever replica's clock
// wrote the run and the epoch. Before runs recorded the epoch they run at, the registry
// compared the epoch's time with the run's creation, written by two clocks: it took the
// inspect for one created before the move, and left it running, to wait out its step's
// timeout.
func TestCutOffAcrossSkewedClocks(t *testing.T) {
	ahead, behind := startSkewedReplicas(t, nil, newShiftedClock(-replicaSkew))
	n := storetest.Node(t, ahead.r.st, store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:0b:01"}, State: store.NodeReady})

	first, err := call[api.CertificatesRevoked](ahead.tenants["acme"], "metal.revokeCertificates", api.RevokeNodeCertificatesRequest{NodeID: n.ID, Reason: "rotating"})
	if err != nil {
		t.Fatalf("the first revocation: %v", err)
	}
	if first.FailedWorkflowID != "" {
		t.Fatalf("the first revocation failed workflow %s, with none running", first.FailedWorkflowID)
	}
	inspect, err := call[api.TransitionStarted](behind.tenants["acme"], "metal.inspect", api.TransitionRequest{NodeID: n.ID})
	if err != nil {
		t.Fatalf("metal.inspect on the replica behind: %v", err)
	}
	var run store.Run
	if err := behind.r.st.View(func(tx *store.Tx) (err error) { run, err = tx.Run(inspect.WorkflowID); return err }); err != nil {
		t.Fatalf("reading the inspect: %v", err)
	}
	if run.State != store.RunRunning || !run.CreatedAt.Before(first.RevokedAt) {
		t.Fatalf("the inspect is %s, created at %v; want it running, created before the epoch's move at %v by the other clock", run.State, run.CreatedAt, first.RevokedAt)
	}

	second, err := call[api.CertificatesRevoked](ahead.tenants["acme"], "metal.revokeCertificates", api.RevokeNodeCertificatesRequest{NodeID: n.ID, Reason: "OS compromised"})
	if err != nil {
		t.Fatalf("the second revocation: %v", err)
	}
	if second.FailedWorkflowID != inspect.WorkflowID {
		t.Errorf("the second revocation failed workflow %q, want the inspect %s, which runs at the epoch it moved", second.FailedWorkflowID, inspect.WorkflowID)
	}
	if err := behind.r.st.View(func(tx *store.Tx) (err error) { run, err = tx.Run(inspect.WorkflowID); return err }); err != nil {
		t.Fatalf("reading the inspect: %v", err)
	}
	if run.Cancelled == nil {
		t.Errorf("the inspect is %s, not failed, after the revocation cut it off", run.State)
	}
}
