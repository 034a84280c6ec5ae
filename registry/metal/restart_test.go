package metal

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/store"
	"github.com/google/go-cmp/cmp"
)

// settle waits for the node's workflow, and the ones its end chains, to end, restarting
// the registry whenever it crashes, and returns the node.
func (h *harness) settle(node string) store.Node {
	h.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		select {
		case <-h.machine.crashed:
			h.restart()
			h.machine.mu.Lock()
			h.machine.crashed, h.machine.crashAt = make(chan struct{}), 0
			h.machine.mu.Unlock()
		default:
		}
		var n store.Node
		var run store.Run
		err := h.store.View(func(tx *store.Tx) (err error) {
			if n, err = tx.Node(node); err == nil {
				run, err = tx.Run(n.Workflow)
			}
			return err
		})
		if err != nil {
			h.t.Fatal(err)
		}
		if run.State != store.RunRunning {
			return n
		}
	}
	h.t.Fatalf("node %s's workflows did not end", node)
	return store.Node{}
}

// lifecycleWalk walks a node of a pool that commissions its machines through every
// workflow of the lifecycle, the registry crashing at the crashAt-th command the machine
// gets (before it, or once it answered). It returns the state after each request, the
// commands the machine ran.
func lifecycleWalk(t *testing.T, crashAt int, after bool) (states, commands []string) {
	h := newHarness(t)
	h.machine.crashAt, h.machine.crashAfter, h.machine.crashed = crashAt, after, make(chan struct{})
	h.setPolicy(store.PoolPolicy{HardwareProfile: "gpu-redfish", Enrollment: store.EnrollCommission})
	n, _ := h.startEnroll("52:54:00:00:00:01", nil)
	states = append(states, h.settle(n.ID).State)
	for _, req := range []Request{Deploy, Rescue, Unrescue, Remediate, Release, Retire} {
		var err error
		switch req {
		case Deploy:
			_, err = h.deploy(n.ID, "testdata/deploy-only.json")
		case Remediate:
			_, _, err = h.remediate(n.ID, ProfileRemediateReboot, "")
		default:
			_, _, err = h.act(n.ID, req, Options{})
		}
		if err != nil {
			t.Fatalf("%s: %v", req, err)
		}
		states = append(states, h.settle(n.ID).State)
	}
	seen := map[string]bool{}
	for _, r := range h.machine.got {
		if seen[r.ID] {
			t.Errorf("command %s ran twice", r.ID)
		}
		seen[r.ID] = true
		commands = append(commands, r.Role+" "+r.Kind+" "+strings.ReplaceAll(r.Input, n.ID, "NODE"))
	}
	return states, commands
}

// TestLifecycleSurvivesRestarts crashes the registry before and after every command of
// a walk through the whole lifecycle (enrollment chaining inspection and commissioning,
// deploy, rescue, unrescue, remediate, release, retire): after the restart the node ends each
// transition in the state the table says, and no command runs twice.
func TestLifecycleSurvivesRestarts(t *testing.T) {
	wantStates := []string{store.NodeReady, store.NodeActive, store.NodeRescue, store.NodeActive, store.NodeActive, store.NodeReady, store.NodeRetired}
	states, commands := lifecycleWalk(t, 0, false)
	if diff := cmp.Diff(wantStates, states); diff != "" {
		t.Fatalf("states without a crash (-want +got):\n%s", diff)
	}
	for at := 1; at <= len(commands); at++ {
		for _, after := range []bool{false, true} {
			t.Run(fmt.Sprintf("command %d after=%t", at, after), func(t *testing.T) {
				got, cmds := lifecycleWalk(t, at, after)
				if diff := cmp.Diff(wantStates, got); diff != "" {
					t.Errorf("states (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(commands, cmds); diff != "" {
					t.Errorf("commands (-without a crash +with one):\n%s", diff)
				}
			})
		}
	}
}

// TestCancelSurvivesARestart: a registry that crashes once a cancel has committed, before
// the attempt was abandoned, resumes the run as cancelled: the rest of its main steps
// are not run, its cleanup runs once, and the node fails with reason cancelled.
func TestCancelSurvivesARestart(t *testing.T) {
	h := newHarness(t)
	node := h.inState(store.NodeInspecting)
	err := h.store.Update(func(tx *store.Tx) error { _, _, err := h.svc.Act(tx, "acme", node, Cancel, Options{}); return err })
	if err != nil {
		t.Fatal(err)
	}
	h.restart()
	n := h.settle(node)
	if n.State != store.NodeFailed || n.FailedFrom != store.NodeInspecting || n.Failure.Error.Details.Reason != "cancelled" {
		t.Fatalf("node %s from %s, %+v", n.State, n.FailedFrom, n.Failure)
	}
	if diff := cmp.Diff([]string{"site management.setBootDevice", "site boot.prepareRamdisk", "site power.setPower", "site boot.cleanUp"}, h.machine.kinds()); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
}
