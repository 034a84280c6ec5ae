package store

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// TestARamdiskCertificateEndsWithItsRun: the certificate of a node's ramdisk names the
// workflow run that minted the token it joined with, and is taken only while that run is
// the node's running one, or a rescue that succeeded and is still the node's last
// workflow (its ramdisk stays up until unrescue, or from failed until the next
// workflow). Once the run ended, or another began, it is FORBIDDEN, reason run-ended,
// as a host that kept the ramdisk's key would present it; one that names no run is
// taken for the node's last workflow's. The installed OS's certificate is not touched.
// Before, every one was taken until the node's identity epoch moved.
func TestARamdiskCertificateEndsWithItsRun(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withPool(t, open)
		n := addNode(t, s)
		check := func(what string, role proto.Role, run, reason string) {
			t.Helper()
			var err error
			s.View(func(tx *Tx) error {
				err = tx.CheckAgent(proto.AgentCredential{Node: n.ID, Role: role, Epoch: n.IdentityEpoch, Run: run})
				return nil
			})
			switch {
			case reason == "" && err != nil:
				t.Errorf("%s: %v, want it taken", what, err)
			case reason != "" && (proto.CodeOf(err) != proto.Forbidden || proto.AsError(err).Details.Reason != reason):
				t.Errorf("%s: %v, want FORBIDDEN %s", what, err, reason)
			}
		}
		begin := func(kind string, failure *StepFailure) string { t.Helper(); return beginRun(t, s, n.ID, kind, failure) }
		end := func(id, state string) { t.Helper(); endRun(t, s, n.ID, id, state) }

		check("a ramdisk of no run on a node where none ran", proto.RoleRamdisk, "", proto.ReasonRunEnded)
		inspect := begin("inspect", nil)
		check("the inspection's ramdisk while it runs", proto.RoleRamdisk, inspect, "")
		check("a ramdisk of no run while the inspection runs", proto.RoleRamdisk, "", "")
		check("a ramdisk of another run", proto.RoleRamdisk, "wf_0000000000000000", proto.ReasonRunEnded)
		end(inspect, RunSucceeded)
		check("the inspection's ramdisk once it succeeded", proto.RoleRamdisk, inspect, proto.ReasonRunEnded)
		check("a ramdisk of no run once the inspection succeeded", proto.RoleRamdisk, "", proto.ReasonRunEnded)
		check("the installed OS", proto.RoleNode, "", "")

		commission := begin("commission", nil)
		check("the inspection's ramdisk while a commissioning runs", proto.RoleRamdisk, inspect, proto.ReasonRunEnded)
		end(commission, RunFailed)
		check("the commissioning's ramdisk once it failed", proto.RoleRamdisk, commission, proto.ReasonRunEnded)

		// A rescue from failed keeps the node's failure; its ramdisk stays up past its
		// success, until the node's next workflow begins.
		failure := &StepFailure{RunID: commission}
		rescue := begin(TransitionRescue, failure)
		end(rescue, RunSucceeded)
		check("the ramdisk of a rescue from failed that succeeded", proto.RoleRamdisk, rescue, "")
		retry := begin("commission", failure)
		check("the rescue's ramdisk once a retry began", proto.RoleRamdisk, rescue, proto.ReasonRunEnded)
		end(retry, RunSucceeded)
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.UpdateNode(n.ID, func(n *Node) error { n.Failure = nil; return nil })
			return err
		})

		rescue = begin(TransitionRescue, nil)
		end(rescue, RunSucceeded)
		check("the ramdisk of a rescue that succeeded", proto.RoleRamdisk, rescue, "")
		unrescue := begin("unrescue", nil)
		check("the rescue's ramdisk once unrescue began", proto.RoleRamdisk, rescue, proto.ReasonRunEnded)
		end(unrescue, RunSucceeded)

		rescue = begin(TransitionRescue, nil)
		end(rescue, RunFailed)
		check("the ramdisk of a rescue that failed", proto.RoleRamdisk, rescue, proto.ReasonRunEnded)
	})
}

// beginRun starts a run of kind on node, as metal does, the node keeping failure.
func beginRun(t *testing.T, s *Store, node, kind string, failure *StepFailure) string {
	t.Helper()
	var id string
	mustUpdate(t, s, func(tx *Tx) error {
		r, err := tx.CreateRun(Run{Kind: kind, Node: node, Tenant: "acme", Document: json.RawMessage(`{}`), Steps: []RunStep{{Phase: "main"}}})
		if err != nil {
			return err
		}
		id = r.ID
		_, err = tx.UpdateNode(node, func(n *Node) error { n.Workflow, n.Transition, n.Failure = r.ID, kind, failure; return nil })
		return err
	})
	return id
}

// endRun ends run id of node in state, and writes the node in the same transaction as
// metal does, its failure recorded when the run failed.
func endRun(t *testing.T, s *Store, node, id, state string) {
	t.Helper()
	mustUpdate(t, s, func(tx *Tx) error {
		r, err := tx.UpdateRun(id, func(r *Run) error { r.State = state; return nil })
		if err != nil {
			return err
		}
		_, err = tx.UpdateNode(node, func(n *Node) error {
			if state == RunFailed {
				n.Failure = &StepFailure{RunID: r.ID}
			}
			return nil
		})
		return err
	})
}

// TestOnNodeIdentityToldOfRuns checks the hook the agent endpoint ends a ramdisk's
// session from as its run ends: told of a commit that begins one of the node's workflows
// or ends it, with whether it ended it, and not of a change of the node's state alone;
// the node as told refuses the ramdisk of a run that ended (run-ended) without a read,
// as Tx.CheckAgent does, and takes a rescue's that succeeded. On etcd the other replica
// is told of the end too.
func TestOnNodeIdentityToldOfRuns(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withPool(t, open)
		n := addNode(t, s)
		var got []string
		defer s.OnNodeIdentity(func(c NodeChange) { got = append(got, toldRun(c)) })()
		expect := func(what string, want ...string) {
			t.Helper()
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s: told (-want +got):\n%s", what, diff)
			}
			got = nil
		}
		inspect := beginRun(t, s, n.ID, "inspect", nil)
		expect("an inspection begun", "inspect running, its ramdisk taken")
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.UpdateNode(n.ID, func(n *Node) error { n.State = NodeInspecting; return nil })
			return err
		})
		expect("a change of state")
		endRun(t, s, n.ID, inspect, RunSucceeded)
		expect("the inspection's end", "inspect ended, its ramdisk refused run-ended")
		rescue := beginRun(t, s, n.ID, TransitionRescue, nil)
		endRun(t, s, n.ID, rescue, RunSucceeded)
		expect("a rescue that succeeded", "rescue running, its ramdisk taken", "rescue ended, its ramdisk taken")
		rescue = beginRun(t, s, n.ID, TransitionRescue, nil)
		endRun(t, s, n.ID, rescue, RunFailed)
		expect("a rescue that failed", "rescue running, its ramdisk taken", "rescue ended, its ramdisk refused run-ended")
	})

	stores := replicas(t, 2)
	local, remote := stores[0], stores[1]
	makePool(t, remote)
	n := addNode(t, remote)
	told := make(chan string, 100)
	defer local.OnNodeIdentity(func(c NodeChange) { told <- toldRun(c) })()
	endRun(t, remote, n.ID, beginRun(t, remote, n.ID, "inspect", nil), RunSucceeded)
	for want := "inspect ended, its ramdisk refused run-ended"; ; {
		select {
		case s := <-told:
			if s == want {
				return
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the other replica was not told %q within 30 s", want)
		}
	}
}

// toldRun says what a node told to OnNodeIdentity says of its workflow and of its
// ramdisk's certificate that names it.
func toldRun(c NodeChange) string {
	state := "running"
	if c.WorkflowEnded {
		state = "ended"
	}
	err := c.CheckAgent(proto.AgentCredential{Node: c.ID, Role: proto.RoleRamdisk, Epoch: c.IdentityEpoch, Run: c.Workflow})
	if err != nil {
		return fmt.Sprintf("%s %s, its ramdisk refused %s", c.Transition, state, proto.AsError(err).Details.Reason)
	}
	return fmt.Sprintf("%s %s, its ramdisk taken", c.Transition, state)
}
