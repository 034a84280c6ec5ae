package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// TestAWaitSaysWhichStepStillRuns: `nodes retry --wait --format json` follows a workflow
// whose first step (power.getPower) waits on a site agent that holds its answer: while
// the step does not change, the command says on stderr, each --progress-every, which step
// still runs, for how long and of which timeout; once the agent answers, the workflow
// ends and stdout is the finished workflow alone, one JSON document. Before, a step that
// took long (wait.agentJoined, boot.kexec: up to 15 minutes) showed nothing at all.
func TestAWaitSaysWhichStepStillRuns(t *testing.T) {
	reg, admin, node := failedNode(t)
	release := make(chan struct{})
	held := func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		select {
		case <-release:
			return json.RawMessage(`{}`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	answered := func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }
	siteAgent(t, reg, "rack-a", nil, map[string]session.Handler{"power.getPower": held, "inspect.oob": answered})

	var out, errb testkit.SyncBuffer
	cmd := exec.Command(testkit.Binary(t, "better-compute"), "nodes", "retry", node.ID, "--wait", "--progress-every", "1s", "--format", "json")
	cmd.Env = append(os.Environ(), "BC_CONFIG="+admin)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	still := "steps[0] power.getPower on site: still running after "
	for deadline := time.Now().Add(time.Minute); strings.Count(errb.String(), still) < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			t.Fatalf("no two lines say the held step still runs:\nstdout:\n%s\nstderr:\n%s", out.String(), errb.String())
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("nodes retry --wait: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	for _, l := range strings.Split(errb.String(), "\n") {
		if strings.HasPrefix(l, still) && !strings.Contains(l, "(timeout ") {
			t.Errorf("%q does not say the step's timeout", l)
		}
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(out.String())))
	var run api.WorkflowView
	if err := dec.Decode(&run); err != nil || run.State != store.RunSucceeded || run.NodeID != node.ID {
		t.Errorf("stdout is not the finished workflow (%v, %s):\n%s", err, run.State, out.String())
	}
	if dec.More() {
		t.Errorf("stdout holds more than one JSON document:\n%s", out.String())
	}
	waitState(t, admin, node.ID, store.NodeReady)
}
