package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/cli"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// TestNodeEventsShowTheLifecycleInOrderAndStayInTheTenant enrolls acme's node and lets
// its enrollment run: `nodes events` shows it in order (the node's state moves, the
// workflow's start, each step's start and end with its duration, the workflow's end),
// `--follow` streams the events of an inspection requested meanwhile, and tenant beta, which may
// read its own nodes, gets NOT_FOUND for acme's node and for acme's workflow named on
// beta's own node, seeing none of acme's events.
func TestNodeEventsShowTheLifecycleInOrderAndStayInTheTenant(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "127.0.0.2/31")
	configs := map[string]string{}
	nodes := map[string]store.Node{}
	for i, tn := range []string{"acme", "beta"} {
		testkit.JSON(t, admin, nil, "tenants", "create", tn)
		testkit.JSON(t, admin, nil, "pools", "create", "gpu", "--site", "rack-a", "--tenant", tn)
		configs[tn] = filepath.Join(t.TempDir(), tn+".conf")
		testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", tn, "--actions", "compute:nodes:manage,compute:nodes:read", "--out", configs[tn])
		var n store.Node
		testkit.JSON(t, configs[tn], &n, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:0"+string(rune('1'+i)), "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0."+string(rune('2'+i)))
		nodes[tn] = n
	}
	answeringSite(t, reg, "rack-a")
	node := waitState(t, configs["acme"], nodes["acme"].ID, store.NodeReady)
	waitState(t, configs["beta"], nodes["beta"].ID, store.NodeReady)

	var log api.EventList
	testkit.JSON(t, configs["acme"], &log, "nodes", "events", node.ID)
	var kinds []string
	started := map[string]bool{}
	for i, e := range log.Events {
		if e.Seq != uint64(i+1) || e.NodeID != node.ID {
			t.Fatalf("event %d: %+v, want seq %d of %s", i, e, i+1, node.ID)
		}
		switch e.Kind {
		case store.EventStepStarted:
			started[e.Step] = true
		case store.EventStepEnded:
			if e.To == store.StepSucceeded && (!started[e.Step] || e.DurationSeconds < 0) {
				t.Errorf("%s ended without its start before it, or with no duration: %+v", e.Step, e)
			}
		}
		if e.Kind != store.EventStepStarted && e.Kind != store.EventStepEnded {
			kinds = append(kinds, e.Kind+":"+e.To)
		}
	}
	want := []string{"node.state:enrolling", "workflow.started:", "workflow.ended:succeeded", "node.state:ready"}
	if strings.Join(kinds, " ") != strings.Join(want, " ") || len(started) == 0 {
		t.Errorf("acme's node's events: %v (steps started %v), want %v around its steps", kinds, started, want)
	}

	// --follow prints the log, then what an inspection adds to it.
	cmd := exec.Command(testkit.Binary(t, "better-compute"), "nodes", "events", node.ID, "--follow", "--format", "json")
	cmd.Env = append(os.Environ(), "BC_CONFIG="+configs["acme"])
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan api.Event)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e api.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Errorf("--follow printed %q: %v", sc.Text(), err)
				return
			}
			lines <- e
		}
	}()
	next := func() api.Event {
		select {
		case e, ok := <-lines:
			if !ok {
				t.Fatal("--follow stopped")
			}
			return e
		case <-time.After(time.Minute):
			t.Fatal("--follow printed nothing more")
		}
		return api.Event{}
	}
	for range log.Events {
		next()
	}
	testkit.JSON(t, configs["acme"], nil, "nodes", "inspect", node.ID)
	for e := next(); !(e.Kind == store.EventNodeState && e.To == store.NodeInspecting); e = next() {
		if e.Seq <= uint64(len(log.Events)) {
			t.Fatalf("--follow printed an old event again: %+v", e)
		}
	}

	// Beta sees none of it.
	betaWorkflow := nodes["beta"].Workflow
	for name, args := range map[string][]string{
		"acme's node":                    {node.ID},
		"acme's node as tenant acme":     {node.ID, "--tenant", "acme"},
		"acme's workflow on beta's node": {nodes["beta"].ID, "--workflow", node.Workflow},
		"acme's node, following":         {node.ID, "--follow"},
	} {
		res := testkit.CLI(t, configs["beta"], append(append([]string{"nodes", "events"}, args...), "--format", "json")...)
		var e testkit.ErrorObject
		json.Unmarshal([]byte(res.Stdout), &e)
		if res.Code != 1 || (e.Code != "NOT_FOUND" && e.Code != "FORBIDDEN") || strings.Contains(res.Stdout, "step.") || strings.Contains(res.Stdout, "node.state") {
			t.Errorf("beta: nodes events %s: exit %d %s%s, want a refusal showing no event", name, res.Code, res.Stdout, res.Stderr)
		}
	}
	if betaWorkflow == "" {
		t.Fatal("beta's node has no workflow")
	}
}

// TestFollowedEventsEndWithAnErrorOfOneLine: `nodes events --follow --format json` prints
// one JSON object a line, and so is the error it ends with (a node it may not see, a
// config it cannot read), so a script that reads the stream line by line reads the error
// too. Before, the error was an object over five lines, none of which decodes alone.
func TestFollowedEventsEndWithAnErrorOfOneLine(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	for name, tc := range map[string]struct{ config, code string }{
		"a node that is not there": {reg.AdminConfig, "NOT_FOUND"},
		"no config":                {noConfig, "INVALID_CONFIG"},
	} {
		res := testkit.CLI(t, tc.config, "nodes", "events", "nd_0000000000000000", "--follow", "--format", "json")
		lines := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n")
		var e testkit.ErrorObject
		if res.Code != 1 || len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &e) != nil || e.Code != tc.code {
			t.Errorf("%s: exit %d, %d lines, want 1 line of %s:\n%s", name, res.Code, len(lines), tc.code, res.Stdout)
		}
	}
}

// TestFollowedEventsTablePrintsItsHeaderOnce: `nodes events --follow` as a table prints
// the table's header once, before the first event, and not again as new events come.
// Before, it printed no header at all.
func TestFollowedEventsTablePrintsItsHeaderOnce(t *testing.T) {
	_, admin, node := failedNode(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb testkit.SyncBuffer
	done := make(chan int)
	go func() {
		done <- cli.Run(ctx, []string{"nodes", "events", node.ID, "--follow"}, cli.Env{Stdout: &out, Stderr: &errb,
			Getenv: func(k string) string { return map[string]string{"BC_CONFIG": admin}[k] }})
	}()
	waitFor := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), what); {
			if time.Now().After(deadline) {
				t.Fatalf("--follow never printed %q:\n%s%s", what, out.String(), errb.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("node.state")
	printed := strings.Count(out.String(), "\n")
	testkit.JSON(t, admin, nil, "nodes", "retry", node.ID)
	for deadline := time.Now().Add(time.Minute); strings.Count(out.String(), "\n") == printed; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("--follow printed nothing of the retry:\n%s", out.String())
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(out.String(), "\n")
	if n := strings.Count(out.String(), "SEQ "); n != 1 || !strings.HasPrefix(lines[0], "SEQ ") {
		t.Errorf("the header is printed %d times, want once, first:\n%s", n, out.String())
	}
}
