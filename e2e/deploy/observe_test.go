package deploy

import (
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// TestDeployMovesTheMetricsAndWritesItsEvents scrapes the registry's /metrics before and
// after a loopback deploy: the deploy's run and each of its steps are counted with their
// outcome and duration, the API call that started it, the node's move from ready to
// active, the agents that joined and the NodeSpec pushed to bcd node and acknowledged;
// no series names the node. The node's event log holds the deploy in order: the run's
// start, the node's move to deploying, each step's start and end with the duration the run
// recorded, the run's end and the move to active.
func TestDeployMovesTheMetricsAndWritesItsEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a machine end to end")
	}
	w, raw := hostWorld(t)
	if w.reg.MetricsURL == "" {
		t.Fatal("serve --metrics-listen printed no metrics URL")
	}
	id, _ := w.readyMachine(t, "52:54:00:12:34:21", "4c4c4544-0042-3510-8052-b4c04f595851", len(raw))
	before, _ := testkit.Scrape(t, w.reg.MetricsURL)
	res := testkit.CLI(t, w.admin, "nodes", "deploy", id, "--profile", "e2e-host", "--wait")
	if res.Code != 0 {
		t.Fatalf("deploy: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	waitFor(t, 30*time.Second, func() bool {
		var v api.NodeView
		testkit.JSON(t, w.admin, &v, "nodes", "get", id)
		return v.Agent != nil && v.Agent.ObservedGeneration >= 1 && v.Agent.ObservedGeneration == v.Agent.DesiredGeneration
	})
	after, text := testkit.Scrape(t, w.reg.MetricsURL)
	moved := func(series string) float64 { return after[series] - before[series] }
	for series, want := range map[string]float64{
		`better_compute_workflow_runs_total{kind="deploy",outcome="succeeded",profile="custom"}`: 1,
		`better_compute_workflow_run_duration_seconds_count{kind="deploy"}`:                      1,
		`better_compute_workflow_steps_total{outcome="succeeded",step="deploy.deploy"}`:          1,
		`better_compute_workflow_steps_total{outcome="succeeded",step="boot.kexec"}`:             1,
		`better_compute_workflow_steps_total{outcome="succeeded",step="power.setPower"}`:         1,
		`better_compute_workflow_step_duration_seconds_count{step="deploy.deploy"}`:              1,
		`better_compute_api_requests_total{code="OK",method="metal.deploy"}`:                     1,
		`better_compute_api_request_duration_seconds_count{method="metal.deploy"}`:               1,
		`better_compute_nodes{state="active"}`:                                                   1,
		`better_compute_nodes{state="ready"}`:                                                    -1,
	} {
		if got := moved(series); got != want {
			t.Errorf("%s moved by %v over the deploy, want %v", series, got, want)
		}
	}
	for _, series := range []string{`better_compute_agent_handshakes_total{result="full"}`, `better_compute_agent_nodespec_pushes_total`,
		`better_compute_agent_nodespec_acks_total{result="applied"}`} {
		if moved(series) < 1 {
			t.Errorf("%s did not move over the deploy (%v to %v)", series, before[series], after[series])
		}
	}
	if got := moved(`better_compute_deploy_read_bytes_total{location="cache"}`); got <= 0 || got > float64(len(raw)) {
		t.Errorf("the deploy stream read %v bytes from the cache", got)
	}
	if moved(`better_compute_deploy_written_bytes_total`) <= 0 {
		t.Errorf("the deploy stream wrote nothing to the disk")
	}
	if after[`better_compute_agent_sessions{role="site"}`] != 1 || after[`better_compute_agent_sessions{role="node"}`] != 1 {
		t.Errorf("agent sessions after the deploy: site %v, node %v; want 1 each", after[`better_compute_agent_sessions{role="site"}`], after[`better_compute_agent_sessions{role="node"}`])
	}
	if strings.Contains(text, id) {
		t.Errorf("a series names the node %s", id)
	}

	var node store.Node
	testkit.JSON(t, w.admin, &node, "nodes", "get", id)
	var run api.WorkflowView
	testkit.JSON(t, w.admin, &run, "workflows", "get", node.Workflow)
	var log api.EventList
	testkit.JSON(t, w.admin, &log, "nodes", "events", id)
	var got []string
	durations := map[string]float64{}
	for _, e := range log.Events {
		if e.WorkflowID != run.ID {
			continue
		}
		got = append(got, e.Kind+" "+e.Step+" "+e.To)
		if e.Kind == store.EventStepEnded {
			durations[e.Step] = e.DurationSeconds
		}
	}
	want := []string{store.EventWorkflowStarted + "  ", store.EventNodeState + "  " + store.NodeDeploying}
	for _, s := range run.Steps {
		want = append(want, store.EventStepStarted+" "+s.Path()+" ", store.EventStepEnded+" "+s.Path()+" "+s.State)
		if took := s.FinishedAt.Sub(s.StartedAt).Seconds(); durations[s.Path()] != took {
			t.Errorf("%s ended after %vs, the run says %vs", s.Path(), durations[s.Path()], took)
		}
	}
	want = append(want, store.EventWorkflowEnded+"  "+store.RunSucceeded, store.EventNodeState+"  "+store.NodeActive)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the deploy's events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
