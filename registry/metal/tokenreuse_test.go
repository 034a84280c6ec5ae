package metal

import (
	"context"
	"strings"
	"testing"
	"time"

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
		if _, secret, err = tx.CreateJoinToken(store.TokenRamdisk, id, "", tx.Now().Add(time.Hour)); err != nil {
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
		if err := h.svc.TokenReused(context.Background(), tok, from); err != nil {
			t.Fatal(err)
		}
		var last store.Event
		if err := h.store.View(func(tx *store.Tx) error {
			events, _, err := tx.Events(id, "", store.Page{})
			for _, e := range events {
				if e.Kind == store.EventTokenReused {
					last = e
				}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
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
