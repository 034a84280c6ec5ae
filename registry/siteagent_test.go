package registry

import (
	"context"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
)

// TestWaitAgentJoinedSiteThroughTheRegistry: a registry's workflow whose wait.agentJoined
// has role site, started while the site agent (joined with a site token, over real QUIC)
// is stopped, waits; it completes once the site agent's session opens again. Before, the
// site agent's session was recorded as its site's, never as a join of the node, and the
// step waited until its timeout (15 minutes).
func TestWaitAgentJoinedSiteThroughTheRegistry(t *testing.T) {
	f := startBusyFleet(t)
	ctx := t.Context()
	site := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	end := site.session(ctx, site.start()) // it answers the enrollment's BMC reads
	c := f.tenants[busyTenants[0]]
	node, ok := f.enrollReady(c, 0, 1)
	if !ok {
		t.FailNow()
	}
	end()
	connected := func() (open bool) {
		f.r.st.View(func(tx *store.Tx) error {
			s, _, err := tx.AgentSession("rack-a")
			open = s.Connected
			return err
		})
		return open
	}
	f.wait("the site agent's session recorded as ended", func() bool { return !connected() })

	f.must(c.Call(ctx, "profiles.create", api.CreateProfileRequest{Document: api.Document(
		`{"id": "site-up", "version": 1, "target": "metal", "steps": [{"use": "wait.agentJoined", "with": {"role": "site"}}]}`)}, nil), "profiles.create")
	started, err := call[api.DeployStarted](c, "metal.deploy", api.DeployRequest{NodeID: node.ID, ProfileID: "site-up"})
	if !f.must(err, "metal.deploy") {
		t.FailNow()
	}
	run := func() api.WorkflowView {
		wf, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: started.WorkflowID})
		f.must(err, "workflows.get")
		return wf
	}
	f.wait("the wait for the site agent to start", func() bool { wf := run(); return wf.Steps[0].State == store.StepRunning })
	time.Sleep(300 * time.Millisecond)
	if wf := run(); wf.State != store.RunRunning {
		t.Fatalf("with the site agent stopped the run %s: %+v", wf.State, wf.Failure)
	}

	defer site.session(context.Background(), site.start())()
	f.wait("the run to end once the site agent is back", func() bool { return run().State != store.RunRunning })
	if wf := run(); wf.State != store.RunSucceeded {
		t.Errorf("the run %s: %+v", wf.State, wf.Failure)
	}
}
