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
// host, contained while the epoch of its join holds (the ramdisk it admitted holds a
// certificate until then), then changing nothing (TestRamdiskTokenReadByAnotherHost,
// e2e/deploy, contains one whose deploy runs).
func TestRamdiskTokenPresentedAgainHonestly(t *testing.T) {
	h := newHarness(t)
	id := h.enroll(nil)
	epoch := h.node(id).IdentityEpoch
	tok := h.joinedAtEpoch(store.TokenFor{Kind: store.TokenRamdisk, NodeID: id}, "10.0.0.5", epoch)
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
	if n := h.node(id); n.IdentityEpoch != epoch || n.State != store.NodeReady {
		t.Errorf("node %s at epoch %d after the reuses from its join's address, want ready at %d: nothing contained", n.State, n.IdentityEpoch, epoch)
	}
	if d := told("10.0.0.9"); !strings.Contains(d, "Another host may have read") || !strings.Contains(d, "moved the node's identity epoch") {
		t.Errorf("another address, no workflow running, its join's epoch held: %s", d)
	}
	if d := told("10.0.0.7"); !strings.Contains(d, "nothing was changed") {
		t.Errorf("another address, its join's epoch moved: %s", d)
	}
	if n := h.node(id); n.IdentityEpoch != epoch+1 || n.State != store.NodeReady || n.CheckAgent(proto.RoleRamdisk, epoch) == nil {
		t.Errorf("node %s at epoch %d after the reuses, want ready at %d, refusing the ramdisk of %d", n.State, n.IdentityEpoch, epoch+1, epoch)
	}
}

// reused tells h's metal service of tok presented again from from and returns the last
// token.reused event of tok's node.
func (h *harness) reused(tok store.JoinToken, from string) store.Event {
	h.t.Helper()
	if err := h.svc.TokenReused(context.Background(), tok, from); err != nil {
		h.t.Fatal(err)
	}
	return h.lastEvent(tok.NodeID, store.EventTokenReused)
}

// lastEvent is node's last event of kind; zero when it has none.
func (h *harness) lastEvent(node, kind string) store.Event {
	h.t.Helper()
	var last store.Event
	if err := h.store.View(func(tx *store.Tx) error {
		events, _, err := tx.Events(node, "", store.Page{})
		for _, e := range events {
			if e.Kind == kind {
				last = e
			}
		}
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	return last
}

// joinedWith mints the token f (tok) and a second one of its kind for its node, left
// unused, and consumes tok by a join from joinFrom.
func (h *harness) joinedWith(f store.TokenFor, joinFrom string) (tok store.JoinToken) {
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
	return tok
}

// joinedAtEpoch mints the token f and consumes it by a join from joinFrom that issued a
// certificate of the node's identity epoch epoch (Tx.JoinedAt), as the JoinService does.
func (h *harness) joinedAtEpoch(f store.TokenFor, joinFrom string, epoch int64) (tok store.JoinToken) {
	h.t.Helper()
	if err := h.store.Update(func(tx *store.Tx) error {
		_, secret, err := tx.CreateJoinToken(f, tx.Now().Add(time.Hour))
		if err != nil {
			return err
		}
		if tok, err = tx.ConsumeJoinToken(secret, joinFrom); err != nil {
			return err
		}
		tok, err = tx.JoinedAt(tok, epoch, "")
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	return tok
}

// mintedAndReused mints the token f (tok) and a second one of its kind for its node, left
// unused, consumes tok by a join from joinFrom and, a minute later, tells the metal
// service of it presented again from from, and returns tok with the node's event.
func (h *harness) mintedAndReused(f store.TokenFor, joinFrom, from string) (tok store.JoinToken, e store.Event) {
	h.t.Helper()
	tok = h.joinedWith(f, joinFrom)
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
// not answered yet), an operator's token (tokens create: no workflow minted it) whose
// containment does not reach the deploy is presented again from 10.0.0.5 after its join
// from 10.0.0.9: the event fails no workflow. A ramdisk or provisioned one joined before
// the deploy started changes nothing (the deploy's start moved the node's identity epoch
// past its join), and the deploy runs on (one joined during the deploy holds its epoch
// and is contained: TestContainedTokenFailsTheWorkflowItCutsOff). A provisioned one joined after an operator
// revoked the node's agents during the deploy is contained (the epoch moves, the unused
// tokens are deleted), but the revocation failed the deploy already, agents-revoked
// (TestRevocationFailsTheWorkflowItCutsOff), and the containment fails nothing more: the
// deploy's failure stays the revocation's. Before the token recorded its minter, the
// deploy was taken for it and failed token-reused; before an operator's token was told
// apart from one joined during the deploy, the provisioned case was joined during it and
// contained without failing the deploy it cut off
// (TestContainedTokenFailsTheWorkflowItCutsOff); before a revocation failed the workflow
// it cut off, the deploy ran on after both.
func TestOperatorsTokenReusedWhileADeployRuns(t *testing.T) {
	for name, tc := range map[string]struct {
		kind string
		// before: the token joined before the deploy started; revoked: the node's agents
		// were revoked after the deploy started, before the token was minted.
		before, revoked bool
		contained       bool
		says            string
	}{
		"ramdisk before the deploy":      {kind: store.TokenRamdisk, before: true, says: "No workflow minted it (an operator did"},
		"provisioned before the deploy":  {kind: store.TokenProvisioned, before: true, says: "identity epoch moved since its join"},
		"provisioned after a revocation": {kind: store.TokenProvisioned, revoked: true, contained: true, says: "moved the node's identity epoch"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			id := h.enroll(nil)
			f := store.TokenFor{Kind: tc.kind, NodeID: id}
			var tok store.JoinToken
			if tc.before {
				tok = h.joinedWith(f, "10.0.0.9")
				h.clock.Advance(time.Minute)
			}
			run := h.deployAwaitingKexec(id)
			if tc.revoked {
				h.clock.Advance(time.Minute)
				if r := h.revoke(id, "the machine was moved", ""); r.Failed.ID != run.ID {
					t.Fatalf("the revocation failed workflow %q, want the deploy %s", r.Failed.ID, run.ID)
				}
			}
			if !tc.before {
				tok = h.joinedWith(f, "10.0.0.9")
			}
			epoch, unused := h.node(id).IdentityEpoch, h.unusedTokens(id)
			h.clock.Advance(time.Minute)
			e := h.reused(tok, "10.0.0.5")
			if e.Workflow != "" || e.Error != nil || !strings.Contains(e.Detail, tc.says) {
				t.Errorf("event %+v, want it failing no workflow and saying %q", e, tc.says)
			}
			if tc.revoked {
				ended, n := h.end(run.ID)
				if ended.State != store.RunFailed || n.Failure == nil || n.Failure.Error.Details.Reason != proto.ReasonAgentsRevoked {
					t.Errorf("deploy %s %s, node %s failed with %+v: want it failed by the revocation, agents-revoked", run.ID, ended.State, n.State, n.Failure)
				}
			} else {
				var now store.Run
				if err := h.store.View(func(tx *store.Tx) (err error) { now, err = tx.Run(run.ID); return err }); err != nil {
					t.Fatal(err)
				}
				// A failed run is marked cancelled in the transaction that fails it.
				n := h.node(id)
				if now.State != store.RunRunning || now.Cancelled != nil || n.Workflow != run.ID || n.Failure != nil {
					t.Errorf("deploy %s %s, cancelled with %+v; node %s failed with %+v: want the deploy running", run.ID, now.State, now.Cancelled, n.State, n.Failure)
				}
			}
			wantEpoch, wantUnused := epoch, unused
			if tc.contained {
				wantEpoch, wantUnused = epoch+1, 0
			}
			if n := h.node(id); n.IdentityEpoch != wantEpoch || h.unusedTokens(id) != wantUnused {
				t.Errorf("node at epoch %d with %d unused token(s), want %d with %d", n.IdentityEpoch, h.unusedTokens(id), wantEpoch, wantUnused)
			}
		})
	}
}

// TestContainedTokenFailsTheWorkflowItCutsOff: a provisioned or ramdisk token no running
// workflow minted (an operator's, from tokens create; or the last deploy's, after that
// deploy ended) joins from 10.0.0.9 while one of the node's workflows runs, at the identity
// epoch that workflow runs at, and is presented again from 10.0.0.5: the registry
// contains it, and the epoch's move cuts the workflow's own agents off and deletes its
// join tokens, so the workflow fails at once, FORBIDDEN token-reused, saying why and
// what to do; the event names it. So it goes for a deploy awaiting its installed OS (its
// ramdisk loses its certificate, its installation's provisioned token is deleted), for
// one that has not reached a ramdisk yet (its boot entry's ramdisk token and its
// provisioned token are deleted), for an inspect, which did not move the epoch but whose
// ramdisk holds it, and for a remediation restarting the installed OS, whose rejoin
// would never come. Before, the workflow was left running: the deploy failed only when
// boot.kexec's 15-minute timeout ran out, TIMEOUT "boot.kexec did not finish within its
// timeout of 15m", saying nothing of the containment.
func TestContainedTokenFailsTheWorkflowItCutsOff(t *testing.T) {
	for _, kind := range []string{store.TokenProvisioned, store.TokenRamdisk} {
		t.Run(kind, func(t *testing.T) { containedFailsWhatItCutsOff(t, kind) })
	}
}

// containedFailsWhatItCutsOff is TestContainedTokenFailsTheWorkflowItCutsOff for a token
// of kind.
func containedFailsWhatItCutsOff(t *testing.T, kind string) {
	eachCutOffWorkflow(t, func(t *testing.T, h *harness, run store.Run, minted string, epoch int64) {
		id := run.Node
		tok, e := h.mintedAndReused(store.TokenFor{Kind: kind, NodeID: id, Workflow: minted}, "10.0.0.9", "10.0.0.5")
		h.failedAtOnce(run, epoch, proto.ReasonTokenReused)
		if e.Workflow != run.ID || e.Error == nil || e.Error.Code != proto.Forbidden || e.Error.Details.Reason != proto.ReasonTokenReused ||
			!strings.Contains(e.Detail, "failed workflow "+run.ID) {
			t.Fatalf("event %+v, want it failing %s FORBIDDEN token-reused", e, run.ID)
		}
		minter := "which no workflow minted"
		if minted != "" {
			minter = "which workflow " + minted + " minted before it ended"
		}
		again := RunAgain(run.Kind, id)
		for _, says := range []string{"token " + tok.ID, minter, "from 10.0.0.5", "this " + run.Kind + " workflow runs at", "agents this workflow works with were cut off",
			"policy.measuredBoot", again} {
			if !strings.Contains(e.Error.Message, says) {
				t.Errorf("the failure does not say %q: %s", says, e.Error.Message)
			}
		}
	})
}

// failedAtOnce checks that run, cut off by a move of its node's identity epoch from
// epoch, is failed at once, with no step's timeout run out (a failed run is marked
// cancelled in the transaction that fails it), then that it ends failed with reason, its
// node at the next epoch with no unused join token.
func (h *harness) failedAtOnce(run store.Run, epoch int64, reason string) {
	h.t.Helper()
	var now store.Run
	if err := h.store.View(func(tx *store.Tx) (err error) { now, err = tx.Run(run.ID); return err }); err != nil {
		h.t.Fatal(err)
	}
	if now.Cancelled == nil {
		h.t.Fatalf("%s %s still %s after the epoch moved, not failed", run.Kind, run.ID, now.State)
	}
	ended, n := h.end(run.ID)
	if ended.State != store.RunFailed || n.State != store.NodeFailed || n.Failure == nil || n.Failure.Error.Details.Reason != reason {
		h.t.Errorf("run %s, node %s failed with %+v; want the %s failed %s", ended.State, n.State, n.Failure, run.Kind, reason)
	}
	if n.IdentityEpoch != epoch+1 || h.unusedTokens(n.ID) != 0 {
		h.t.Errorf("node at epoch %d with %d unused token(s), want %d with none", n.IdentityEpoch, h.unusedTokens(n.ID), epoch+1)
	}
}

// eachCutOffWorkflow runs test in a subtest of t, with a harness of its own, once a
// workflow that runs at the node's identity epoch and works with its agents, which an
// epoch's move cuts off, has started: a deploy awaiting its installed OS, one before its
// ramdisk joined, an inspect on its ramdisk and a remediation restarting the installed
// OS. test gets the workflow, the last deploy of the node when it ended before ("" for
// none), which minted a provisioned token, and the node's identity epoch.
func eachCutOffWorkflow(t *testing.T, test func(t *testing.T, h *harness, run store.Run, lastDeploy string, epoch int64)) {
	for name, start := range map[string]func(h *harness) (store.Run, string){
		"deploy awaiting its installed OS": func(h *harness) (store.Run, string) { return h.deployAwaitingKexec(h.enroll(nil)), "" },
		"deploy before its ramdisk joined": func(h *harness) (store.Run, string) {
			h.machine.hang(proto.CommandSetPower)
			run, err := h.deploy(h.enroll(nil), "testdata/gpu-host.json")
			if err != nil {
				h.t.Fatal(err)
			}
			h.relayedYet("site", proto.CommandSetPower)
			return run, ""
		},
		"inspect on its ramdisk": func(h *harness) (store.Run, string) {
			h.machine.hang(proto.CommandInventoryRefresh)
			run, _, err := h.act(h.enroll(nil), Inspect, Options{})
			if err != nil {
				h.t.Fatal(err)
			}
			h.relayedYet("ramdisk", proto.CommandInventoryRefresh)
			return run, ""
		},
		"remediation restarting the installed OS": func(h *harness) (store.Run, string) {
			id := h.active("52:54:00:00:00:01")
			deploy := h.node(id).Workflow
			h.machine.forget()
			h.machine.hang(proto.CommandSetPower)
			run, _, err := h.remediate(id, ProfileRemediateReboot, "")
			if err != nil {
				h.t.Fatal(err)
			}
			h.relayedYet("site", proto.CommandSetPower)
			return run, deploy
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			run, lastDeploy := start(h)
			test(t, h, run, lastDeploy, h.node(run.Node).IdentityEpoch)
		})
	}
}

// TestRunAgain: what works after a containment or a revocation failed a workflow it cut
// off, by the workflow's kind. A workflow that boots the ramdisk or installs the OS anew
// mints its tokens again, so `nodes retry` runs it again; one that works with the
// installed OS, which lost its certificate, needs that OS to join again first (a
// remediation) or as it boots (an unrescue), or a redeploy; a rescue's retry works, but
// the installed OS must join again by the unrescue. Before, each said `nodes retry`, and
// the revocation's error "or deploy the node again" for every kind: a retried
// remediation or unrescue waited out its step's timeout for an agent the registry
// refuses.
func TestRunAgain(t *testing.T) {
	const (
		mint     = "`tokens create --kind provisioned --node-id nd_1`"
		redeploy = "or redeploy the node (`nodes release nd_1`, then `nodes deploy nd_1 --profile P`)"
	)
	for kind, want := range map[string]string{
		"deploy":     "deploy the node again (`nodes retry nd_1`): it installs the OS anew, with a new token in its user data",
		"inspect":    "run the inspect workflow again (`nodes retry nd_1`): it boots the ramdisk with a new token",
		"commission": "run the commission workflow again (`nodes retry nd_1`): it boots the ramdisk with a new token",
		"release":    "run the release workflow again (`nodes retry nd_1`): it boots the ramdisk with a new token",
		"retire":     "run the retire workflow again (`nodes retry nd_1`): it boots the ramdisk with a new token",
		"enroll":     "run the enroll workflow again (`nodes retry nd_1`)",
		"rescue": "run the rescue workflow again (`nodes retry nd_1`): it boots the ramdisk with a new token; the installed OS holds no certificate the registry takes either: " +
			"mint it a token (" + mint + ") and join it with that token (`bcd join` on the machine) once unrescue boots it",
		"remediate": "join the installed OS again first, as it holds no certificate the registry takes (" + mint + ", then `bcd join` on the machine), " +
			"then run the remediate workflow again (`nodes retry nd_1`), which works with it; " + redeploy,
		"unrescue": "mint the installed OS a token, as it holds no certificate the registry takes (" + mint + "), run the unrescue workflow again (`nodes retry nd_1`) and, " +
			"once the installed OS boots, join it with the token (`bcd join` on the machine): the workflow waits for that join; " + redeploy,
		"": "run it again (`nodes retry nd_1`), unless it works with the installed OS (a remediation, an unrescue), which holds no certificate the registry takes: " +
			"join the installed OS again first (" + mint + ", then `bcd join` on the machine), " + redeploy,
	} {
		if got := RunAgain(kind, "nd_1"); got != want {
			t.Errorf("after a cut-off %q:\n got %s\nwant %s", kind, got, want)
		}
	}
}

// TestTokenReuseAdvice: what a token.reused event from another address says to do fits
// the token's kind, who minted it, and the workflow the registry failed or none: what
// runs that workflow again (RunAgain), never "deploy the node again" but for a deploy;
// an operator's provisioned token that held the node's identity has the installed OS join again with a new token, the last deploy's
// a redeploy; the deploy.image is checked only when a deploy (or a run no longer
// stored) minted the token; the node's agents are revoked only when the ramdisk that
// joined first still holds its certificate. Before, every case said to deploy the node
// again and check the machines that got its deploy.image.
func TestTokenReuseAdvice(t *testing.T) {
	const (
		measured = "set policy.measuredBoot on pool gpu, so that a host that holds a token cannot pass for the machine."
		revoke   = "unless both addresses are this machine's, revoke the node's agents (`nodes revoke-identity nd_1`): the ramdisk that joined with the token still holds its certificate; "
		check    = "check the installed agent of any machine that got the deploy.image of the workflow that minted the token; "
	)
	ramdisk := store.JoinToken{Kind: store.TokenRamdisk, Workflow: "wf_1"}
	provisioned := store.JoinToken{Kind: store.TokenProvisioned, Workflow: "wf_1"}
	operators := store.JoinToken{Kind: store.TokenProvisioned}
	for name, tc := range map[string]struct {
		advice reuseAdvice
		want   string
	}{
		"ramdisk token of the running deploy": {reuseAdvice{tok: ramdisk, minter: "deploy", failed: "deploy", contained: true},
			RunAgain("deploy", "nd_1") + "; " + check + measured},
		"ramdisk token of the running inspect": {reuseAdvice{tok: ramdisk, minter: "inspect", failed: "inspect", contained: true},
			RunAgain("inspect", "nd_1") + "; " + measured},
		"ramdisk token of the running commission": {reuseAdvice{tok: ramdisk, minter: "commission", failed: "commission", contained: true},
			RunAgain("commission", "nd_1") + "; " + measured},
		"ramdisk token of the running rescue": {reuseAdvice{tok: ramdisk, minter: "rescue", failed: "rescue", contained: true},
			RunAgain("rescue", "nd_1") + "; " + measured},
		"ramdisk token of a deploy that ended": {reuseAdvice{tok: ramdisk, minter: "deploy"},
			revoke + check + measured},
		"ramdisk token of an inspect that ended": {reuseAdvice{tok: ramdisk, minter: "inspect"},
			revoke + measured},
		"ramdisk token of a run no longer stored": {reuseAdvice{tok: ramdisk, minter: unknownMinter},
			revoke + check + measured},
		"operator's ramdisk token": {reuseAdvice{tok: store.JoinToken{Kind: store.TokenRamdisk}},
			revoke + measured},
		"provisioned token of the running deploy": {reuseAdvice{tok: provisioned, minter: "deploy", failed: "deploy", contained: true},
			RunAgain("deploy", "nd_1") + "; " + check + measured},
		"provisioned token of the deploy that ended, holding the identity": {reuseAdvice{tok: provisioned, minter: "deploy", contained: true},
			"redeploy the node (`nodes release nd_1`, then `nodes deploy nd_1 --profile P`): the installation's user data, which carried the token, may have reached another host, " +
				"and the machine's installed OS lost its certificate; " + check + measured},
		"provisioned token of the deploy that ended, cutting off an inspect": {reuseAdvice{tok: provisioned, minter: "deploy", failed: "inspect", contained: true},
			RunAgain("inspect", "nd_1") + "; " + check + measured},
		"provisioned token of a deploy, its epoch gone": {reuseAdvice{tok: provisioned, minter: "deploy"},
			check + measured},
		"operator's provisioned token, holding the identity": {reuseAdvice{tok: operators, contained: true},
			"join the machine's installed OS again with a token minted now (`tokens create --kind provisioned --node-id nd_1`, then `bcd join` on the machine), " +
				"keeping it where no other host reads it; " + measured},
		"operator's provisioned token, cutting off a deploy": {reuseAdvice{tok: operators, failed: "deploy", contained: true},
			RunAgain("deploy", "nd_1") + "; " + measured},
		"operator's provisioned token, cutting off a remediation": {reuseAdvice{tok: operators, failed: "remediate", contained: true},
			RunAgain("remediate", "nd_1") + "; " + measured},
		"operator's provisioned token, its epoch gone": {reuseAdvice{tok: operators},
			measured},
	} {
		t.Run(name, func(t *testing.T) {
			tc.advice.node, tc.advice.pool = "nd_1", "gpu"
			if got, want := tc.advice.String(), "What to do: "+tc.want; got != want {
				t.Errorf("advice:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestRamdiskTokenReusedWhileItsInspectRuns: the ramdisk token an inspect minted, joined
// first from another address than the one it comes again from while the inspect runs,
// fails the inspect FORBIDDEN token-reused, its error and the event saying to run the
// inspect again, and nothing of a deploy, which did not run. Before, both said to
// deploy the node again and check the machines that got its deploy.image.
func TestRamdiskTokenReusedWhileItsInspectRuns(t *testing.T) {
	h := newHarness(t)
	id := h.enroll(nil)
	h.machine.hang(proto.CommandInventoryRefresh)
	run, _, err := h.act(id, Inspect, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.relayedYet("ramdisk", proto.CommandInventoryRefresh)
	_, e := h.mintedAndReused(store.TokenFor{Kind: store.TokenRamdisk, NodeID: id, Workflow: run.ID}, "10.0.0.9", "10.0.0.5")
	if e.Workflow != run.ID || e.Error == nil || e.Error.Details.Reason != proto.ReasonTokenReused {
		t.Fatalf("event %+v, want it failing the inspect %s token-reused", e, run.ID)
	}
	for what, text := range map[string]string{"failure": e.Error.Message, "detail": e.Detail} {
		if !strings.Contains(text, "run the inspect workflow again (`nodes retry "+id+"`)") || strings.Contains(text, "deploy the node again") || strings.Contains(text, "deploy.image of") {
			t.Errorf("the event's %s does not say to run the inspect again, or speaks of a deploy: %s", what, text)
		}
	}
}

// TestRamdiskTokenJoinedFirstByAHostThatFinishedTheDeploy, as the other host would try it:
// it read the deploy's ramdisk token from the boot script before the machine's ramdisk
// fetched it, joined first from 10.0.0.9 as the node's ramdisk, answered deploy.image and
// boot.kexec itself and joined with the provisioned token the user data carried as the
// node's installed OS, so the deploy ended, the node active, before the machine's slow
// ramdisk arrived. That ramdisk presents the token again from 10.0.0.5 and is refused
// token-used; the machine never reaches an installed OS, so no provisioned token comes
// again to tell on the other host. The reuse is contained all the same while the epoch
// of the token's join holds: the epoch moves, so both certificates the other host got at
// it (ramdisk and installed OS) are refused, and the node's unused tokens are deleted.
// Before, a ramdisk token whose workflow had ended changed nothing: the other host kept
// its session, the node's NodeSpecs and the secrets they name until an operator acted.
func TestRamdiskTokenJoinedFirstByAHostThatFinishedTheDeploy(t *testing.T) {
	h := newHarness(t)
	id := h.active("52:54:00:00:00:01")
	n := h.node(id)
	deploy, epoch := n.Workflow, n.IdentityEpoch
	tok := h.joinedAtEpoch(store.TokenFor{Kind: store.TokenRamdisk, NodeID: id, Workflow: deploy}, "10.0.0.9", epoch)
	if err := h.store.Update(func(tx *store.Tx) error {
		_, _, err := tx.CreateJoinToken(store.TokenFor{Kind: store.TokenProvisioned, NodeID: id}, tx.Now().Add(time.Hour))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Minute)
	e := h.reused(tok, "10.0.0.5")
	n = h.node(id)
	if n.IdentityEpoch != epoch+1 || n.CheckAgent(proto.RoleRamdisk, epoch) == nil || n.CheckAgent(proto.RoleNode, epoch) == nil {
		t.Errorf("node at epoch %d after the machine's ramdisk presented the token again, want %d: the other host's certificates of epoch %d are still taken (%s)",
			n.IdentityEpoch, epoch+1, epoch, e.Detail)
	}
	if left := h.unusedTokens(id); left != 0 {
		t.Errorf("%d unused join token(s) of the node left", left)
	}
	if e.Workflow != "" || !strings.Contains(e.Detail, "moved the node's identity epoch") || !strings.Contains(e.Detail, "redeploy the node") {
		t.Errorf("event %+v, want the epoch moved, no workflow failed and a redeploy advised", e)
	}

	h.clock.Advance(time.Minute)
	if e := h.reused(tok, "10.0.0.7"); !strings.Contains(e.Detail, "nothing was changed") || h.node(id).IdentityEpoch != epoch+1 {
		t.Errorf("presented again after its join's epoch moved, the epoch moved again or the event says: %s", e.Detail)
	}
}

// TestExpiredRamdiskTokenCannotCutTheNodeOff, as a host on the provisioning network would
// try it against another tenant's node: it fetched the deploy's boot script in the
// machine's name after the machine's ramdisk joined, waited until the deploy ended and
// the token expired, and presents it from its own address to move the node's identity
// epoch and cut the installed OS off. Nothing is changed: a ramdisk token, which travels
// in a boot script over plain HTTP, is contained after its workflow ended only while it
// lives, and the machine's own ramdisk arriving second comes with it before then
// (TestRamdiskTokenJoinedFirstByAHostThatFinishedTheDeploy).
func TestExpiredRamdiskTokenCannotCutTheNodeOff(t *testing.T) {
	h := newHarness(t)
	id := h.active("52:54:00:00:00:01")
	n := h.node(id)
	epoch := n.IdentityEpoch
	tok := h.joinedAtEpoch(store.TokenFor{Kind: store.TokenRamdisk, NodeID: id, Workflow: n.Workflow}, "10.0.0.5", epoch)
	h.clock.Advance(time.Hour)
	e := h.reused(tok, "10.0.0.9")
	if n := h.node(id); n.IdentityEpoch != epoch || n.CheckAgent(proto.RoleNode, epoch) != nil {
		t.Errorf("node at epoch %d after an expired ramdisk token came again from another address, want %d: the installed OS was cut off (%s)", n.IdentityEpoch, epoch, e.Detail)
	}
	if !strings.Contains(e.Detail, "expired at") || !strings.Contains(e.Detail, "nothing was changed") || e.Workflow != "" {
		t.Errorf("event %+v, want it saying the token expired and nothing was changed", e)
	}
}
