package metal

import (
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// revoke revokes node's agents as credential by asks, for reason, and starts the
// workflow the revocation failed (which abandons its attempt), as the API does once the
// transaction has committed.
func (h *harness) revoke(node, reason, by string) AgentsRevoked {
	h.t.Helper()
	var r AgentsRevoked
	if err := h.store.Update(func(tx *store.Tx) (err error) {
		r, err = h.svc.RevokeAgents(tx, "acme", node, reason, by)
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	if r.Failed.ID != "" {
		h.svc.Start(r.Failed)
	}
	return r
}

// TestRevocationFailsTheWorkflowItCutsOff: an operator revokes the node's agents
// (nodes revoke-identity) while one of its workflows runs at the node's identity epoch
// and works with its agents. The epoch's move refuses their certificates and deletes the
// node's unused join tokens, so the workflow cannot complete: it fails at once, with no
// clock advanced, FORBIDDEN agents-revoked, its error saying which credential revoked the
// agents and why, that the workflow's agents and tokens were cut off, and what works for
// its kind (RunAgain: a remediation's installed OS joins again first); the
// agents.revoked event names it, and the revocation says which it failed. So it goes for
// a deploy awaiting its installed OS, one before its ramdisk joined, an inspect on its
// ramdisk and a remediation restarting the installed OS. Before, the workflow was left
// running: the deploy failed only when boot.kexec's 15-minute timeout ran out, TIMEOUT,
// saying nothing of the revocation; and every kind's error said to run it again or
// deploy the node again, which a remediation cannot while its installed OS holds no
// certificate.
func TestRevocationFailsTheWorkflowItCutsOff(t *testing.T) {
	eachCutOffWorkflow(t, func(t *testing.T, h *harness, run store.Run, _ string, epoch int64) {
		id := run.Node
		r := h.revoke(id, "OS compromised", "cr_0123456789abcdef")
		if rec := r.Node.AgentsRevoked; r.Failed.ID != run.ID || rec.FailedWorkflow != run.ID || rec.FailedKind != run.Kind {
			t.Errorf("the revocation says it failed %q, and records it failed %q, a %q; want %s, a %s", r.Failed.ID, rec.FailedWorkflow, rec.FailedKind, run.ID, run.Kind)
		}
		e := h.lastEvent(id, store.EventAgentsRevoked)
		if e.Workflow != run.ID || e.Error == nil || e.Error.Code != proto.Forbidden || e.Error.Details.Reason != proto.ReasonAgentsRevoked ||
			!strings.Contains(e.Detail, "failed workflow "+run.ID) || !strings.Contains(e.Detail, "OS compromised, by credential cr_0123456789abcdef") {
			t.Errorf("event %+v, want it failing %s FORBIDDEN agents-revoked", e, run.ID)
		} else {
			for _, says := range []string{"agents were revoked by credential cr_0123456789abcdef", `for the reason "OS compromised"`, "this " + run.Kind + " workflow ran at",
				"agents this workflow works with were cut off and its join tokens deleted", "Once the machine is trusted again, " + RunAgain(run.Kind, id)} {
				if !strings.Contains(e.Error.Message, says) {
					t.Errorf("the failure does not say %q: %s", says, e.Error.Message)
				}
			}
			if run.Kind != string(Deploy) && strings.Contains(e.Error.Message, "deploy the node again") {
				t.Errorf("the failure of a %s says to deploy the node again: %s", run.Kind, e.Error.Message)
			}
			if !strings.Contains(e.Detail, RunAgain(run.Kind, id)) {
				t.Errorf("the event's detail does not say what runs the %s again: %s", run.Kind, e.Detail)
			}
		}
		h.failedAtOnce(run, epoch, proto.ReasonAgentsRevoked)
	})
}

// TestRevocationFailsNoWorkflowItDoesNotCutOff: a revocation with no workflow running
// fails none; one while an out-of-band inspect runs on a pool whose machines run no
// agent fails none either (only the machine's BMC is reached, and no join token is
// minted: nothing of it is cut off); and a retired node's identity is revoked for good
// already: INVALID_STATE, changing nothing.
func TestRevocationFailsNoWorkflowItDoesNotCutOff(t *testing.T) {
	h := newHarness(t)
	id := h.enroll(nil)
	epoch := h.node(id).IdentityEpoch
	failsNone := func(when string) {
		t.Helper()
		if r := h.revoke(id, "", ""); r.Failed.ID != "" || r.Node.AgentsRevoked.FailedWorkflow != "" || r.Node.IdentityEpoch != epoch+1 {
			t.Errorf("%s: the revocation failed %q and left epoch %d, want none failed and epoch %d", when, r.Failed.ID, r.Node.IdentityEpoch, epoch+1)
		}
		if e := h.lastEvent(id, store.EventAgentsRevoked); e.Workflow != "" || e.Error != nil || e.Detail != "an operator asked" {
			t.Errorf("%s: event %+v, want it failing nothing", when, e)
		}
		epoch++
	}
	failsNone("with no workflow running")

	h.setPolicy(store.PoolPolicy{Agent: store.AgentNone})
	h.machine.hang(proto.CommandInspectOOB)
	run, _, err := h.act(id, Inspect, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.relayedYet("site", proto.CommandInspectOOB)
	failsNone("during an out-of-band inspect")
	var now store.Run
	if err := h.store.View(func(tx *store.Tx) (err error) { now, err = tx.Run(run.ID); return err }); err != nil {
		t.Fatal(err)
	}
	if now.State != store.RunRunning || now.Cancelled != nil {
		t.Errorf("the out-of-band inspect %s after the revocation, cancelled with %+v; want it running", now.State, now.Cancelled)
	}
	if _, _, err := h.act(id, Cancel, Options{}); err != nil {
		t.Fatal(err)
	}
	h.end(run.ID)

	if run, _, err = h.act(id, Retire, Options{}); err != nil {
		t.Fatal(err)
	}
	if run, n := h.end(run.ID); n.State != store.NodeRetired {
		t.Fatalf("retire: run %s, node %s %+v", run.State, n.State, n.Failure)
	}
	before := h.node(id)
	err = h.store.Update(func(tx *store.Tx) error { _, err := h.svc.RevokeAgents(tx, "acme", id, "", ""); return err })
	if e := proto.AsError(err); e.Code != proto.InvalidState || h.node(id).Rev != before.Rev {
		t.Errorf("revoking a retired node's agents: %v, node rev %d (was %d); want INVALID_STATE changing nothing", err, h.node(id).Rev, before.Rev)
	}
}

// TestCutOffByTheEpochTheRunRecords: a run records the identity epoch it runs at, the
// node's as an inspect found it or the one a deploy's start moved it to, and a
// revocation cuts it off by that epoch (TestCutOffAcrossSkewedClocks, registry: with
// the replicas' clocks skewed). A run stored before runs recorded their epoch keeps the
// rule of before: one created since the epoch last moved is cut off, one created before
// it is not.
func TestCutOffByTheEpochTheRunRecords(t *testing.T) {
	for name, tc := range map[string]struct {
		deploy bool
		// stored: the run as a registry stored it before runs recorded their epoch,
		// created at this offset from the epoch's last move.
		stored  bool
		created time.Duration
		cut     bool
	}{
		"an inspect, at the node's epoch":               {cut: true},
		"a deploy, at the epoch its start moved to":     {deploy: true, cut: true},
		"stored before, created since the epoch moved":  {stored: true, created: time.Minute, cut: true},
		"stored before, created before the epoch moved": {stored: true, created: -time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			id := h.enroll(nil)
			before := h.node(id).IdentityEpoch
			var run store.Run
			if tc.deploy {
				run = h.deployAwaitingKexec(id)
			} else {
				h.machine.hang(proto.CommandInventoryRefresh)
				var err error
				if run, _, err = h.act(id, Inspect, Options{}); err != nil {
					t.Fatal(err)
				}
				h.relayedYet("ramdisk", proto.CommandInventoryRefresh)
			}
			n, want := h.node(id), before
			if tc.deploy {
				want++
			}
			if run.IdentityEpoch == nil || *run.IdentityEpoch != want || n.IdentityEpoch != want {
				t.Fatalf("the %s records epoch %v, the node is at %d; want both at %d", run.Kind, run.IdentityEpoch, n.IdentityEpoch, want)
			}
			if tc.stored {
				if err := h.store.Update(func(tx *store.Tx) error {
					_, err := tx.UpdateRun(run.ID, func(r *store.Run) error {
						r.IdentityEpoch, r.CreatedAt = nil, n.IdentityEpochAt.Add(tc.created)
						return nil
					})
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			r := h.revoke(id, "", "")
			if got := r.Failed.ID == run.ID; got != tc.cut {
				t.Errorf("the revocation failed %q; want the %s %s failed: %t", r.Failed.ID, run.Kind, run.ID, tc.cut)
			}
		})
	}
}

// TestATenantsProfileRevokesNoIdentity: a tenant's profile version stored before
// metal.revokeIdentity was held to the retire profiles, whose last step revokes the
// node's identity, is refused at its deploy (INVALID_STATE, saying to run `profiles
// validate`), and the ready node keeps its state and its identity. Before, the deploy ran,
// revoked the identity of the tenant's own node and left it active with no agent able
// to join, only retirable.
func TestATenantsProfileRevokesNoIdentity(t *testing.T) {
	h := newHarness(t)
	node := h.inState(store.NodeReady)
	doc := `{"id":"self-revoke","version":1,"target":"metal","image":{"ref":"ubuntu-24.04-server@2026.09"},"steps":[{"use":"deploy.deploy"},{"use":"metal.revokeIdentity"}]}`
	before := h.node(node)
	run, err := h.deployRecord(node, func(tx *store.Tx) (store.ProfileRecord, error) {
		return tx.CreateProfile(store.ProfileRecord{Tenant: "acme", ID: "self-revoke", Version: 1, Document: []byte(doc)})
	})
	if err == nil {
		_, n := h.end(run.ID)
		t.Fatalf("the deploy of a profile that revokes the node's identity ran: node %s, identity revoked at %v", n.State, n.IdentityRevokedAt)
	}
	if proto.CodeOf(err) != proto.InvalidState || !strings.Contains(err.Error(), "metal.revokeIdentity") || !strings.Contains(err.Error(), "profiles validate") {
		t.Errorf("the deploy: %v, want INVALID_STATE naming metal.revokeIdentity and `profiles validate`", err)
	}
	if after := h.node(node); after.Rev != before.Rev || !after.IdentityRevokedAt.IsZero() {
		t.Errorf("the refused deploy changed the node: %s rev %d (was %d), identity revoked at %v", after.State, after.Rev, before.Rev, after.IdentityRevokedAt)
	}
}
