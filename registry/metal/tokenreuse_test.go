package metal

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// TestRamdiskTokenPresentedAgainHonestly: a ramdisk token presented again from the
// address of its join once the session it admitted is over (the machine rebooted into
// its standing boot entry, or bcd ramdisk restarted before it kept its join) is told as
// the machine's own ramdisk and changes nothing; while that session is open, as what
// cannot be told apart; from another address with no workflow running, as another
// host, still changing nothing. Only a running workflow that prepared it is contained
// (TestRamdiskTokenReadByAnotherHost, e2e/deploy).
func TestRamdiskTokenPresentedAgainHonestly(t *testing.T) {
	h := newHarness(t)
	id := h.enroll(nil)
	epoch := h.node(id).IdentityEpoch
	var tok store.JoinToken
	var secret string
	if err := h.store.Update(func(tx *store.Tx) (err error) {
		if _, secret, err = tx.CreateJoinToken(store.TokenFor{Kind: store.TokenRamdisk, NodeID: id}, tx.Now().Add(time.Hour)); err != nil {
			return err
		}
		tok, err = tx.ConsumeJoinToken(secret, "10.0.0.5")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// A registry's run holds its sessions; a join admitted has none yet.
	joins := workflow.NewJoinLog(h.store, store.Holder{Replica: "r1", Started: h.clock.Now()})
	h.svc.cfg.Joins = joins
	if err := joins.Admitted(id, "ramdisk"); err != nil {
		t.Fatal(err)
	}
	told := func(from string) string {
		t.Helper()
		last := h.reused(tok, from)
		if last.From != "10.0.0.5" || last.To != from || last.Error != nil || last.Workflow != "" {
			t.Errorf("from %s: event %+v, want from 10.0.0.5 to %s, failing nothing", from, last, from)
		}
		return last.Detail
	}
	if d := told("10.0.0.5"); !strings.Contains(d, "this machine's ramdisk again") || strings.Contains(d, "Another host") {
		t.Errorf("the same address after the join's session: %s", d)
	}
	if err := joins.Joined(id, "ramdisk", bootID(99)); err != nil {
		t.Fatal(err)
	}
	if d := told("10.0.0.5"); !strings.Contains(d, "cannot tell them apart") {
		t.Errorf("the same address while the join's session is open: %s", d)
	}
	if d := told("10.0.0.9"); !strings.Contains(d, "Another host may have read") || !strings.Contains(d, "nothing was changed") {
		t.Errorf("another address, no workflow running: %s", d)
	}
	if n := h.node(id); n.IdentityEpoch != epoch || n.State != store.NodeReady {
		t.Errorf("node %s at epoch %d after the reuses, want ready at %d: nothing contained", n.State, n.IdentityEpoch, epoch)
	}
}

// reused tells h's metal service of tok presented again from from and returns the last
// token.reused event of tok's node.
func (h *harness) reused(tok store.JoinToken, from string) store.Event {
	h.t.Helper()
	if err := h.svc.TokenReused(context.Background(), tok, from); err != nil {
		h.t.Fatal(err)
	}
	var last store.Event
	if err := h.store.View(func(tx *store.Tx) error {
		events, _, err := tx.Events(tok.NodeID, "", store.Page{})
		for _, e := range events {
			if e.Kind == store.EventTokenReused {
				last = e
			}
		}
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	return last
}

// mintedAndReused mints the token f (tok) and a second one of its kind for its node, left
// unused, consumes tok by a join from joinFrom and, a minute later, tells the metal
// service of it presented again from from, and returns tok with the node's event.
func (h *harness) mintedAndReused(f store.TokenFor, joinFrom, from string) (tok store.JoinToken, e store.Event) {
	h.t.Helper()
	if err := h.store.Update(func(tx *store.Tx) error {
		_, secret, err := tx.CreateJoinToken(f, tx.Now().Add(time.Hour))
		if err != nil {
			return err
		}
		if _, _, err := tx.CreateJoinToken(store.TokenFor{Kind: f.Kind, NodeID: f.NodeID}, tx.Now().Add(time.Hour)); err != nil {
			return err
		}
		tok, err = tx.ConsumeJoinToken(secret, joinFrom)
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	h.clock.Advance(time.Minute)
	return tok, h.reused(tok, from)
}

// unusedTokens is how many unused join tokens node has.
func (h *harness) unusedTokens(node string) (n int) {
	h.t.Helper()
	if err := h.store.View(func(tx *store.Tx) error {
		tokens, _, err := tx.JoinTokens(store.Page{})
		for _, tok := range tokens {
			if tok.NodeID == node && tok.UsedAt.IsZero() {
				n++
			}
		}
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// TestProvisionedTokenJoinedFirstElsewhere: a host that read a node's provisioned token
// (from the deploy.image it got by joining first as the node's ramdisk) joined first as
// the node's installed OS, from 10.0.0.9; the machine's installed OS presents the token
// again from 10.0.0.5, with no workflow running (the deploy took the other host's join
// for the machine's rejoin). The node's event names both addresses, and the registry
// contains it all the same: the other host holds the node's identity, so its epoch moves
// (that host's certificate is refused) and the node's unused join tokens are deleted.
// The used token presented again once more moves nothing: the identity its join got is
// gone already, and a host that kept the token cannot cut each new installed agent off.
// Before, a provisioned token presented again was only logged and counted.
func TestProvisionedTokenJoinedFirstElsewhere(t *testing.T) {
	h := newHarness(t)
	id := h.enroll(nil)
	epoch := h.node(id).IdentityEpoch
	tok, e := h.mintedAndReused(store.TokenFor{Kind: store.TokenProvisioned, NodeID: id}, "10.0.0.9", "10.0.0.5")
	if e.From != "10.0.0.9" || e.To != "10.0.0.5" || e.Workflow != "" || e.Error != nil {
		t.Errorf("event %+v, want from 10.0.0.9 to 10.0.0.5, failing nothing", e)
	}
	for _, says := range []string{"provisioned join token " + tok.ID, "joined as this node's installed OS first", "moved the node's identity epoch", "deleted 1 unused join token(s)"} {
		if !strings.Contains(e.Detail, says) {
			t.Errorf("the event's detail does not say %q: %s", says, e.Detail)
		}
	}
	n := h.node(id)
	if n.IdentityEpoch != epoch+1 || n.CheckAgent(proto.RoleNode, epoch) == nil {
		t.Errorf("node at epoch %d after the reuse, want %d, refusing the certificate of epoch %d", n.IdentityEpoch, epoch+1, epoch)
	}
	if left := h.unusedTokens(id); left != 0 {
		t.Errorf("%d unused join token(s) of the node left", left)
	}

	h.clock.Advance(time.Minute)
	if e := h.reused(tok, "10.0.0.7"); !strings.Contains(e.Detail, "nothing was changed") {
		t.Errorf("presented again after its join's epoch moved: %s", e.Detail)
	}
	if got := h.node(id).IdentityEpoch; got != epoch+1 {
		t.Errorf("node at epoch %d after the token was presented once more, want %d", got, epoch+1)
	}
}

// TestProvisionedTokenPresentedAgainHonestly: bcd join run again on the machine whose
// join used the token (a reboot before the join's unit removed the token file) comes
// from the address of its join, and changes nothing: the event tells it as the machine's
// installed OS again, the epoch stays and the unused tokens are kept.
func TestProvisionedTokenPresentedAgainHonestly(t *testing.T) {
	h := newHarness(t)
	id := h.enroll(nil)
	epoch := h.node(id).IdentityEpoch
	_, e := h.mintedAndReused(store.TokenFor{Kind: store.TokenProvisioned, NodeID: id}, "10.0.0.5", "10.0.0.5")
	if e.From != "10.0.0.5" || e.To != "10.0.0.5" || e.Error != nil || !strings.Contains(e.Detail, "this machine's installed OS again") {
		t.Errorf("event %+v, want the machine's installed OS again", e)
	}
	if n := h.node(id); n.IdentityEpoch != epoch || h.unusedTokens(id) != 1 {
		t.Errorf("node at epoch %d with %d unused token(s) after the honest reuse, want %d with 1", n.IdentityEpoch, h.unusedTokens(id), epoch)
	}
}

// deployAwaitingKexec starts a deploy of node whose boot.kexec the machine never answers,
// and returns its run once that command is relayed: a deploy awaiting its installed OS.
func (h *harness) deployAwaitingKexec(node string) store.Run {
	h.t.Helper()
	h.machine.hang(proto.CommandBootKexec)
	run, err := h.deploy(node, "testdata/gpu-host.json")
	if err != nil {
		h.t.Fatal(err)
	}
	h.relayedYet("ramdisk", proto.CommandBootKexec)
	return run
}

// TestProvisionedTokenReusedWhileItsDeployRuns: the installation's provisioned token,
// minted by the deploy that still runs (its boot.kexec not answered yet; the token names
// the run, as userdata.render's does), joined first from another address than the one it
// comes again from: the deploy fails FORBIDDEN token-reused beside the epoch's move, and
// the event names it.
func TestProvisionedTokenReusedWhileItsDeployRuns(t *testing.T) {
	h := newHarness(t)
	id := h.enroll(nil)
	run := h.deployAwaitingKexec(id)
	epoch := h.node(id).IdentityEpoch
	_, e := h.mintedAndReused(store.TokenFor{Kind: store.TokenProvisioned, NodeID: id, Workflow: run.ID}, "10.0.0.9", "10.0.0.5")
	if e.Workflow != run.ID || e.Error == nil || e.Error.Code != proto.Forbidden || e.Error.Details.Reason != proto.ReasonTokenReused {
		t.Errorf("event %+v, want it failing %s FORBIDDEN token-reused", e, run.ID)
	}
	ended, n := h.end(run.ID)
	if ended.State != store.RunFailed || n.Failure == nil || n.Failure.Error.Details.Reason != proto.ReasonTokenReused || n.IdentityEpoch != epoch+1 {
		t.Errorf("run %s, node at epoch %d (want %d) failed with %+v; want the deploy failed token-reused", ended.State, n.IdentityEpoch, epoch+1, n.Failure)
	}
}

// TestOperatorsTokenReusedWhileADeployRuns: while a node's deploy runs (its boot.kexec
// not answered yet), an operator mints a token for the node by hand (tokens create: no
// workflow minted it); it joins from 10.0.0.9 and is presented again from 10.0.0.5. The
// deploy did not mint it and is not failed: the event fails no workflow. Otherwise the
// token is told as its kind is with no workflow of its own running: a provisioned one
// still holds the node's identity, so the epoch moves and the unused tokens are deleted;
// a ramdisk one changes nothing. Before, the deploy was taken for its minter (it was
// created before the token) and failed token-reused.
func TestOperatorsTokenReusedWhileADeployRuns(t *testing.T) {
	for name, tc := range map[string]struct {
		kind      string
		contained bool
		says      string
	}{
		"provisioned": {store.TokenProvisioned, true, "moved the node's identity epoch"},
		"ramdisk":     {store.TokenRamdisk, false, "No workflow minted it (an operator did"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			id := h.enroll(nil)
			run := h.deployAwaitingKexec(id)
			epoch := h.node(id).IdentityEpoch
			_, e := h.mintedAndReused(store.TokenFor{Kind: tc.kind, NodeID: id}, "10.0.0.9", "10.0.0.5")
			if e.Workflow != "" || e.Error != nil || !strings.Contains(e.Detail, tc.says) {
				t.Errorf("event %+v, want it failing no workflow and saying %q", e, tc.says)
			}
			var now store.Run
			if err := h.store.View(func(tx *store.Tx) (err error) { now, err = tx.Run(run.ID); return err }); err != nil {
				t.Fatal(err)
			}
			// A failed run is marked cancelled in the transaction that fails it.
			n := h.node(id)
			if now.State != store.RunRunning || now.Cancelled != nil || n.Workflow != run.ID || n.Failure != nil {
				t.Errorf("deploy %s %s, cancelled with %+v; node %s failed with %+v: want the deploy running", run.ID, now.State, now.Cancelled, n.State, n.Failure)
			}
			wantEpoch, wantUnused := epoch, 1
			if tc.contained {
				wantEpoch, wantUnused = epoch+1, 0
			}
			if n.IdentityEpoch != wantEpoch || h.unusedTokens(id) != wantUnused {
				t.Errorf("node at epoch %d with %d unused token(s), want %d with %d", n.IdentityEpoch, h.unusedTokens(id), wantEpoch, wantUnused)
			}
		})
	}
}
