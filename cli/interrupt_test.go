package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/cli"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// TestAnInterruptedWaitSaysTheWorkflowGoesOn: an operator who stops `nodes retry --wait`
// (as any --wait) with Ctrl-C is told that only the following stopped, that the workflow
// goes on, and the commands that show and stop it, exit 1. Before, the command said it
// could not reach the registry (interrupt signal received) and asked whether `serve` was
// running, to try again once it is: a registry that answered all along, and a retry that
// would now be refused as the node's workflow runs.
func TestAnInterruptedWaitSaysTheWorkflowGoesOn(t *testing.T) {
	_, admin, node := failedNode(t)
	for _, format := range []string{"table", "json"} {
		t.Run(format, func(t *testing.T) {
			var out, errb testkit.SyncBuffer
			cmd := exec.Command(testkit.Binary(t, "better-compute"), "nodes", "retry", node.ID, "--wait", "--format", format)
			cmd.Env = append(os.Environ(), "BC_CONFIG="+admin)
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := &out
			if format == "json" {
				lines = &errb
			}
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(lines.String(), "power.getPower") {
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					t.Fatalf("the retry's first step never showed:\n%s%s", out.String(), errb.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
			var run api.WorkflowView
			var n api.Node
			testkit.JSON(t, admin, &n, "nodes", "get", node.ID)
			testkit.JSON(t, admin, &run, "workflows", "get", n.Workflow)
			if run.State != api.RunRunning {
				t.Fatalf("the retry's workflow %s is %s after the interrupt, want running", run.ID, run.State)
			}
			said := errb.String()
			if format == "json" {
				var e testkit.ErrorObject
				if err := json.Unmarshal([]byte(out.String()), &e); err != nil {
					t.Fatalf("stdout is not the error object: %v\n%s", err, out.String())
				}
				said = e.Message
			}
			for _, want := range []string{"workflow " + run.ID + " goes on", "`workflows get " + run.ID + "`", "`nodes cancel " + node.ID + "`"} {
				if !strings.Contains(said, want) {
					t.Errorf("exit %d; the interrupted wait does not say %q:\n%s", cmd.ProcessState.ExitCode(), want, said)
				}
			}
			if cmd.ProcessState.ExitCode() != 1 || strings.Contains(said, "cannot reach") {
				t.Errorf("exit %d, want 1 without a registry out of reach:\n%s", cmd.ProcessState.ExitCode(), said)
			}
			if res := testkit.CLI(t, admin, "nodes", "cancel", node.ID, "--wait"); res.Code != 1 {
				t.Fatalf("nodes cancel --wait: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
			}
		})
	}
}

// TestAWaitThatLosesTheRegistrySaysHowToFollowAgain: a registry that stops while
// `nodes retry --wait` follows the workflow it started leaves the command saying it
// cannot reach the registry, and that the workflow was started, with the command that
// shows it once the registry answers again. Before, it said only to try again once the
// registry runs: the retry again, which is refused while the resumed workflow runs.
func TestAWaitThatLosesTheRegistrySaysHowToFollowAgain(t *testing.T) {
	reg, admin, node := failedNode(t)
	var out, errb testkit.SyncBuffer
	cmd := exec.Command(testkit.Binary(t, "better-compute"), "nodes", "retry", node.ID, "--wait")
	cmd.Env = append(os.Environ(), "BC_CONFIG="+admin)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "power.getPower") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the retry's first step never showed:\n%s%s", out.String(), errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	workflow := strings.Fields(strings.TrimPrefix(out.String(), "workflow "))[0]
	workflow = strings.TrimSuffix(workflow, ":")
	reg.Stop()
	cmd.Wait()
	for _, want := range []string{"error: UNAVAILABLE: ", "workflow " + workflow + " was started", "`workflows get " + workflow + "`"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("exit %d; the wait that lost its registry does not say %q:\n%s", cmd.ProcessState.ExitCode(), want, errb.String())
		}
	}
	if cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("exit %d, want 1", cmd.ProcessState.ExitCode())
	}
}

// failedNode is a registry with a node whose enrollment failed, cancelled while its first
// step waited for a site agent that never joins: a node a retry starts a workflow of.
func failedNode(t *testing.T) (*testkit.Registry, string, api.Node) {
	t.Helper()
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "10.0.0.0/24")
	testkit.JSON(t, admin, nil, "pools", "create", "gpu", "--site", "rack-a")
	var node api.Node
	testkit.JSON(t, admin, &node, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "10.0.0.5")
	if res := testkit.CLI(t, admin, "nodes", "cancel", node.ID, "--wait"); res.Code != 1 {
		t.Fatalf("nodes cancel --wait: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	return reg, admin, node
}

// TestAnInterruptedCallSaysItMayHaveBeenDone: a command whose call the operator
// interrupts (Ctrl-C ends the command's context, as here before the call's answer) says
// it was interrupted before the registry answered, that a call that changes something may
// have been carried out, and to look before running it again, exit 1. Before, it said it
// could not reach the registry and to try again once `serve` runs, of a registry that
// answered all along: running it again may do it twice.
func TestAnInterruptedCallSaysItMayHaveBeenDone(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	ctx, interrupt := context.WithCancelCause(t.Context())
	interrupt(errors.New("interrupt signal received"))
	var errb testkit.SyncBuffer
	code := cli.Run(ctx, []string{"tenants", "create", "acme"}, cli.Env{Stdout: io.Discard, Stderr: &errb,
		Getenv: func(k string) string { return map[string]string{"BC_CONFIG": reg.AdminConfig}[k] }})
	said := errb.String()
	if code != 1 || !strings.Contains(said, "interrupted (interrupt signal received) before the registry answered tenants.create") ||
		!strings.Contains(said, "look") || strings.Contains(said, "cannot reach") {
		t.Errorf("exit %d:\n%s\nwant interrupted before the registry answered tenants.create, to look before running it again", code, said)
	}
}
