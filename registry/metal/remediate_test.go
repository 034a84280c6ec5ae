package metal

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// active deploys a machine of mac in pool gpu and returns the active node's id.
func (h *harness) active(mac string) string {
	h.t.Helper()
	n, run := h.startEnroll(mac, nil)
	h.end(run.ID)
	dep, err := h.deploy(n.ID, "testdata/deploy-only.json")
	if err != nil {
		h.t.Fatal(err)
	}
	if _, n := h.end(dep.ID); n.State != store.NodeActive {
		h.t.Fatalf("node %s after its deploy: %+v", n.State, n.Failure)
	}
	return n.ID
}

// TestRemediate: an operator remediates an active node with a shipped remediation
// profile; the node remediates and is active again, its profile and host section kept,
// the reason recorded. Any other profile, or another tenant's node, is refused and
// changes nothing.
func TestRemediate(t *testing.T) {
	h := newHarness(t)
	node := h.active("52:54:00:00:00:01")
	before := h.node(node)
	for _, tc := range []struct {
		node, profile string
		code          proto.Code
		path          string
	}{
		{node, "metal-release", proto.InvalidInput, "profile"},
		{node, "deploy-only", proto.InvalidInput, "profile"},
		{"nd_0000000000000000", ProfileRemediateReboot, proto.NotFound, "nodeId"},
	} {
		_, _, err := h.remediate(tc.node, tc.profile, "")
		if e := proto.AsError(err); err == nil || e.Code != tc.code || e.Details.Path != tc.path {
			t.Errorf("remediate %s with %s: %v, want %s at %s", tc.node, tc.profile, err, tc.code, tc.path)
		}
	}
	err := h.store.Update(func(tx *store.Tx) error {
		_, _, err := h.svc.Remediate(tx, "acme", node, ProfileRemediateReboot, 9, "")
		return err
	})
	if e := proto.AsError(err); err == nil || e.Details.Path != "profileVersion" {
		t.Errorf("remediate-reboot@9: %v", err)
	}
	for _, reason := range []string{strings.Repeat("x", 257), "gone\n\x1b[2J", "\xff"} {
		if _, _, err := h.remediate(node, ProfileRemediateReboot, reason); proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "reason" {
			t.Errorf("reason %q: %v", reason, err)
		}
	}
	if n := h.node(node); n.Rev != before.Rev {
		t.Errorf("refused remediations changed the node: rev %d -> %d", before.Rev, n.Rev)
	}
	run, n, err := h.remediate(node, ProfileRemediateGPUReset, "XID 79 on GPU 3")
	if err != nil {
		t.Fatal(err)
	}
	if n.State != store.NodeRemediating || n.Remediation == nil || n.Remediation.Reason != "XID 79 on GPU 3" || n.Remediation.Automatic || n.Remediation.Workflow != run.ID {
		t.Fatalf("node %s, remediation %+v", n.State, n.Remediation)
	}
	if _, err := h.deploy(node, "testdata/deploy-only.json"); proto.CodeOf(err) != proto.InvalidState {
		t.Errorf("a deploy while remediating: %v", err)
	}
	run, n = h.end(run.ID)
	if run.State != store.RunSucceeded || n.State != store.NodeActive || n.Profile == nil || n.Profile.ID != before.Profile.ID || len(n.Host) != len(before.Host) {
		t.Fatalf("run %s, node %s, profile %+v, failure %+v", run.State, n.State, n.Profile, n.Failure)
	}
	if run.Profile.ID != ProfileRemediateGPUReset {
		t.Errorf("ran %s", run.Profile.ID)
	}
	// A remediation profile is no deploy.
	if _, err := h.deployShipped(node, "remediate-reboot@1"); proto.CodeOf(err) != proto.InvalidInput {
		t.Errorf("metal.deploy of remediate-reboot: %v", err)
	}
	// A pool without agent has no agent to rejoin.
	h.setPolicy(store.PoolPolicy{Agent: store.AgentNone})
	if _, _, err := h.remediate(node, ProfileRemediateReboot, ""); proto.CodeOf(err) != proto.Unsupported {
		t.Errorf("remediate on an agent: none pool: %v", err)
	}
}

// TestRemediateAgentGone: on a pool with policy.remediation, an active node whose agent
// has been gone for agentGoneAfter is remediated with remediate-reboot, the reason on
// the node, and not again before the backoff; a connected node, and a node of a pool
// without the policy, never are.
func TestRemediateAgentGone(t *testing.T) {
	h := newHarness(t)
	gone := h.active("52:54:00:00:00:01")
	here := h.active("52:54:00:00:00:02")
	if err := h.store.Update(func(tx *store.Tx) error {
		_, err := tx.CreatePool(store.Pool{Tenant: "acme", Name: "quiet", Site: "rack-a"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	policy := store.PoolPolicy{HardwareProfile: "gpu-redfish", Remediation: &store.RemediationPolicy{AgentGoneAfter: "15m", Backoff: "1h"}}
	if err := h.svc.CheckPoolPolicy(policy); err != nil {
		t.Fatal(err)
	}
	h.setPolicy(policy)
	h.presence.set(here, true)
	check := func(want ...string) {
		t.Helper()
		runs, err := h.svc.RemediateAgentsGone()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range runs {
			got = append(got, r.Node)
			if r, n := h.end(r.ID); r.State != store.RunSucceeded || n.State != store.NodeActive {
				t.Fatalf("remediation %s: node %s %+v", r.State, n.State, n.Failure)
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("at %s remediated %v, want %v", h.clock.Now().Format(time.TimeOnly), got, want)
		}
	}
	check() // the first check sees the agent gone
	h.clock.Advance(14 * time.Minute)
	check()
	h.clock.Advance(time.Minute)
	check(gone)
	r := h.node(gone).Remediation
	if r == nil || !r.Automatic || r.Profile.ID != ProfileRemediateReboot || !strings.HasPrefix(r.Reason, "agent-gone:") || !r.At.Equal(h.clock.Now()) {
		t.Fatalf("the recorded remediation %+v", r)
	}
	// Still gone: not again within the backoff.
	h.clock.Advance(59 * time.Minute)
	check()
	h.clock.Advance(time.Minute)
	check(gone)
	// Back: nothing.
	h.presence.set(gone, true)
	h.clock.Advance(2 * time.Hour)
	check()
	if h.node(here).Remediation != nil {
		t.Error("a connected node was remediated")
	}
}

// TestRemediationPolicy: policy.remediation's durations are checked with their path.
func TestRemediationPolicy(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		r    store.RemediationPolicy
		path string
	}{
		{store.RemediationPolicy{AgentGoneAfter: "30s"}, "policy.remediation.agentGoneAfter"},
		{store.RemediationPolicy{AgentGoneAfter: "15 minutes"}, "policy.remediation.agentGoneAfter"},
		{store.RemediationPolicy{AgentGoneAfter: "15m", Backoff: "25h"}, "policy.remediation.backoff"},
	} {
		err := h.svc.CheckPoolPolicy(store.PoolPolicy{Remediation: &tc.r})
		if e := proto.AsError(err); err == nil || e.Code != proto.InvalidInput || e.Details.Path != tc.path {
			t.Errorf("%+v: %v, want INVALID_INPUT at %s", tc.r, err, tc.path)
		}
	}
}

// TestRemediationBoundedInAPool: a fault that takes every agent of a pool away at once
// (its network, the registry's agent endpoint) has the policy remediate at most a tenth
// of the pool at a time, at least one node: a node remediating, by hand or not, holds its
// place until it is active again, and one failed in a remediation until an operator acts
// on it (here a retry). Before, the check rebooted every node of the pool in the same minute.
func TestRemediationBoundedInAPool(t *testing.T) {
	h := newHarness(t)
	for i := 1; i <= 12; i++ {
		h.active(fmt.Sprintf("52:54:00:00:00:%02x", i))
	}
	h.setPolicy(store.PoolPolicy{HardwareProfile: "gpu-redfish", Remediation: &store.RemediationPolicy{AgentGoneAfter: "15m", Backoff: "1h"}})
	// Every agent is gone, and a restart never ends: the remediations run on.
	h.machine.hang("power.setPower")
	check := func(want int) []store.Run {
		t.Helper()
		runs, err := h.svc.RemediateAgentsGone()
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != want {
			t.Fatalf("at %s the policy started %d remediations, want %d", h.clock.Now().Format(time.TimeOnly), len(runs), want)
		}
		return runs
	}
	check(0)
	h.clock.Advance(15 * time.Minute)
	first := check(1)[0]
	h.clock.Advance(time.Minute)
	check(0)
	// Cancelled, it failed in a remediation: it keeps its place (a tenth of 12 nodes is
	// one) until the operator acts on it.
	if _, _, err := h.act(first.Node, Cancel, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, n := h.end(first.ID); n.State != store.NodeFailed || n.FailedFrom != store.NodeRemediating {
		t.Fatalf("the cancelled remediation left the node %s from %s", n.State, n.FailedFrom)
	}
	h.clock.Advance(time.Minute)
	check(0)
	// The operator retries it and it ends: the place is free again, for another node
	// (the retried one is within its backoff).
	h.machine.mu.Lock()
	delete(h.machine.hangs, "power.setPower")
	h.machine.mu.Unlock()
	retry, _, err := h.act(first.Node, Retry, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r, n := h.end(retry.ID); r.State != store.RunSucceeded || n.State != store.NodeActive {
		t.Fatalf("the retried remediation %s: node %s", r.State, n.State)
	}
	h.clock.Advance(time.Minute)
	if next := check(1)[0]; next.Node == first.Node {
		t.Errorf("the policy remediated %s again within its backoff", next.Node)
	}
}

// TestRemediationLoopStops: a node whose agent is gone again after each remediation is
// rebooted by the policy three times in a row (each within a day of the one before) and
// then left to its operator, active, its remediation's streak saying so; an operator's
// remediation by hand (or any other workflow on the node) starts the count again.
// Before, the policy rebooted it every backoff for ever.
func TestRemediationLoopStops(t *testing.T) {
	h := newHarness(t)
	node := h.active("52:54:00:00:00:01")
	h.setPolicy(store.PoolPolicy{HardwareProfile: "gpu-redfish", Remediation: &store.RemediationPolicy{AgentGoneAfter: "15m", Backoff: "1h"}})
	// The agent rejoins for each restart and is gone again before the next check.
	remediations := func(span time.Duration) int {
		t.Helper()
		count := 0
		for end := h.clock.Now().Add(span); h.clock.Now().Before(end); h.clock.Advance(15 * time.Minute) {
			runs, err := h.svc.RemediateAgentsGone()
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				if r, n := h.end(r.ID); r.State != store.RunSucceeded || n.State != store.NodeActive {
					t.Fatalf("remediation %s: node %s %+v", r.State, n.State, n.Failure)
				}
				count++
			}
		}
		return count
	}
	if got := remediations(12 * time.Hour); got != 3 {
		t.Fatalf("in 12 hours the policy remediated the node %d times, want 3", got)
	}
	if r := h.node(node).Remediation; r == nil || !r.Automatic || r.Streak != 3 {
		t.Fatalf("the last remediation %+v, want automatic with streak 3", r)
	}
	if got := remediations(48 * time.Hour); got != 0 {
		t.Fatalf("after its streak the policy remediated the node %d more times", got)
	}
	run, _, err := h.remediate(node, ProfileRemediateReboot, "looked at it")
	if err != nil {
		t.Fatal(err)
	}
	if _, n := h.end(run.ID); n.Remediation.Streak != 0 {
		t.Fatalf("a remediation by hand has streak %d", n.Remediation.Streak)
	}
	h.clock.Advance(time.Hour)
	if got := remediations(time.Hour); got != 1 {
		t.Fatalf("after the operator's remediation the policy remediated the node %d times, want 1", got)
	}
	if r := h.node(node).Remediation; r.Streak != 1 {
		t.Errorf("the policy's first remediation after the operator's has streak %d", r.Streak)
	}
}

// TestRemediationLeavesRevokedAgentsAlone: an operator revokes the certificates of an
// active node's agents (its installed OS may be compromised) and its agent is gone, as
// the revocation makes it: the policy leaves the machine as it is, for the operator to
// look at, until its installed OS has joined again with a new token. Before, it was
// restarted (power-cycled when that failed) once agentGoneAfter had passed, and the
// remediation, awaiting an agent whose certificate is refused, could only fail.
func TestRemediationLeavesRevokedAgentsAlone(t *testing.T) {
	h := newHarness(t)
	node := h.active("52:54:00:00:00:01")
	h.setPolicy(store.PoolPolicy{HardwareProfile: "gpu-redfish", Remediation: &store.RemediationPolicy{AgentGoneAfter: "15m", Backoff: "1h"}})
	checks := func(span time.Duration) []store.Run {
		t.Helper()
		var all []store.Run
		for end := h.clock.Now().Add(span); h.clock.Now().Before(end); h.clock.Advance(5 * time.Minute) {
			runs, err := h.svc.RemediateAgentsGone()
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, runs...)
		}
		return all
	}
	h.presence.set(node, true)
	h.revoke(node, "suspected compromise", "")
	h.presence.set(node, false)
	if runs := checks(3 * time.Hour); len(runs) != 0 {
		t.Fatalf("the policy remediated a node whose agents an operator revoked: %s", runs[0].ID)
	}
	if n := h.node(node); n.State != store.NodeActive || n.Remediation != nil {
		t.Fatalf("node %s, remediation %+v", n.State, n.Remediation)
	}
	// Trusted again, the installed OS joins with a new token; when its agent is gone
	// again, the policy remediates it.
	if err := h.joins.Joined(node, string(proto.RoleNode), bootID(99)); err != nil {
		t.Fatal(err)
	}
	runs := checks(30 * time.Minute)
	if len(runs) != 1 {
		t.Fatalf("after the installed OS joined again the policy started %d remediations, want 1", len(runs))
	}
	if r, n := h.end(runs[0].ID); r.State != store.RunSucceeded || n.State != store.NodeActive {
		t.Fatalf("remediation %s: node %s %+v", r.State, n.State, n.Failure)
	}
}

// TestInRemediation: a pool's places of remediation are held by the nodes remediating,
// by hand or by the policy, and by those a remediation of the policy's left failed; a
// remediation an operator ran by hand that failed is the operator's to look at already
// and holds none, so that it never stops the policy from remediating the pool's others.
func TestInRemediation(t *testing.T) {
	failed := func(automatic bool) store.Node {
		return store.Node{State: store.NodeFailed, FailedFrom: store.NodeRemediating, Remediation: &store.Remediation{Automatic: automatic}}
	}
	for _, tc := range []struct {
		name string
		node store.Node
		want bool
	}{
		{"remediating", store.Node{State: store.NodeRemediating}, true},
		{"failed in the policy's remediation", failed(true), true},
		{"failed in a remediation by hand", failed(false), false},
		{"failed deploying", store.Node{State: store.NodeFailed, FailedFrom: store.NodeDeploying}, false},
		{"active", store.Node{State: store.NodeActive}, false},
	} {
		if got := inRemediation(tc.node); got != tc.want {
			t.Errorf("%s: in a remediation %v, want %v", tc.name, got, tc.want)
		}
	}
}
