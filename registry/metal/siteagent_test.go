package metal

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// siteSession records a session of the agent of site rack-a opened now at the registry
// run holder, which holds its lease unless dead (a replica that died holding it).
func (h *harness) siteSession(holder store.Holder, dead bool) {
	h.t.Helper()
	if !dead {
		if err := h.store.Update(func(tx *store.Tx) error { return tx.TakeLease(holder, time.Hour) }); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := workflow.NewJoinLog(h.store, holder).Session("rack-a", string(proto.RoleSite), h.clock.Now(), ""); err != nil {
		h.t.Fatal(err)
	}
}

// TestWaitAgentJoinedSite: wait.agentJoined with role site waits until the agent of the
// node's site holds a session, at this registry or another replica whose lease holds
// (not one recorded by a replica that died), and completes at once when it does
// already: a site agent is no boot of the machine. Before, it waited for a join of the
// node in role site, which no session records, until its timeout.
func TestWaitAgentJoinedSite(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	h.siteSession(store.Holder{Replica: "rg_dead", Started: h.clock.Now()}, true)

	run, err := h.deploy(node, "testdata/site-agent.json")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the wait to start", func() bool {
		r, err := h.engine.Watch(t.Context(), run.ID, 0)
		return err == nil && r.Steps[0].State == store.StepRunning
	})
	h.stillOn(run.ID, 0, "a session recorded by a replica that died")
	h.clock.Advance(time.Second)
	h.siteSession(store.Holder{Replica: "rg_other", Started: h.clock.Now()}, false)
	if run, _ := h.end(run.ID); run.State != store.RunSucceeded {
		t.Fatalf("with the site agent connected at another replica the run %s: %+v", run.State, run.Steps)
	}

	h = newHarness(t)
	h.siteSession(store.Holder{Replica: "rg_here", Started: h.clock.Now()}, false)
	h.clock.Advance(time.Minute)
	run, err = h.deploy(h.enroll(nil), "testdata/site-agent.json")
	if err != nil {
		t.Fatal(err)
	}
	if run, _ := h.end(run.ID); run.State != store.RunSucceeded {
		t.Fatalf("with the site agent connected before the run began, the run %s: %+v", run.State, run.Steps)
	}
}

// TestWaitAgentJoinedSiteOfNoSite: a node at no site has no site agent to wait for:
// wait.agentJoined role site fails INVALID_STATE at node.site at once rather than
// waiting until its timeout.
func TestWaitAgentJoinedSiteOfNoSite(t *testing.T) {
	h := newHarness(t)
	with, _ := json.Marshal(proto.WaitAgentJoined{Role: proto.RoleSite})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := h.svc.waitAgentJoined(ctx, &workflow.Attempt{Node: store.Node{ID: "nd_1"}, Step: profile.RenderedStep{Use: proto.StepWaitAgentJoined, With: with}})
	if e := proto.AsError(err); e.Code != proto.InvalidState || e.Details.Path != "node.site" {
		t.Errorf("wait.agentJoined role site of a node at no site: %v, want INVALID_STATE at node.site", err)
	}
}
