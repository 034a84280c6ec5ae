package store

import (
	"encoding/json"
	"testing"

	"github.com/better-compute/better-compute/proto"
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
		// begin starts a run of kind on the node, as metal does; end ends it so, its
		// failure recorded on the node when it failed.
		begin := func(kind string, failure *StepFailure) string {
			t.Helper()
			var id string
			mustUpdate(t, s, func(tx *Tx) error {
				r, err := tx.CreateRun(Run{Kind: kind, Node: n.ID, Tenant: n.Tenant, Document: json.RawMessage(`{}`), Steps: []RunStep{{Phase: "main"}}})
				if err != nil {
					return err
				}
				id = r.ID
				_, err = tx.UpdateNode(n.ID, func(n *Node) error { n.Workflow, n.Transition, n.Failure = r.ID, kind, failure; return nil })
				return err
			})
			return id
		}
		end := func(id, state string) {
			t.Helper()
			mustUpdate(t, s, func(tx *Tx) error {
				r, err := tx.UpdateRun(id, func(r *Run) error { r.State = state; return nil })
				if err != nil || state == RunSucceeded {
					return err
				}
				_, err = tx.UpdateNode(n.ID, func(n *Node) error { n.Failure = &StepFailure{RunID: r.ID}; return nil })
				return err
			})
		}

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
