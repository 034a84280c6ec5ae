package store

import (
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// TestReplicaLeaseHolds: a holder's lease holds until it expires on the store's clock
// and renewals extend it; a later run of the same replica takes it over (the earlier
// run's sessions no longer count), the earlier run, still up, never renews it back, and
// only the run that holds it releases it. A site
// agent's session recorded open counts as open only while its holder's lease holds.
func TestReplicaLeaseHolds(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) { testReplicaLeaseHolds(t, open) })
}

func testReplicaLeaseHolds(t *testing.T, open opener) {
	st, clk := openOnFakeClock(t, open)
	first := Holder{Replica: "rg_a", Started: clk.Now()}
	update := func(fn func(tx *Tx) error) {
		t.Helper()
		if err := st.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, h Holder, want bool) {
		t.Helper()
		var holds, live bool
		err := st.View(func(tx *Tx) (err error) {
			if holds, err = tx.Holds(h); err != nil {
				return err
			}
			s, _, err := tx.AgentSession("st_rack")
			if err != nil {
				return err
			}
			live, err = s.Live(tx)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if holds != want {
			t.Errorf("%s: %+v holds %v, want %v", what, h, holds, want)
		}
		if h.Is(first) && live != want {
			t.Errorf("%s: the session of %+v is live %v, want %v", what, h, live, want)
		}
	}
	check("no lease", first, false)
	update(func(tx *Tx) error { return tx.TakeLease(first, 30*time.Second) })
	update(func(tx *Tx) error { return tx.OpenAgentSession("st_rack", "site", first, clk.Now()) })
	check("leased", first, true)
	check("an unnamed holder", Holder{}, false)
	clk.Advance(20 * time.Second)
	update(func(tx *Tx) error { return tx.RenewLease(first, 30*time.Second) })
	clk.Advance(29 * time.Second)
	check("renewed, 29 s later", first, true)
	clk.Advance(time.Second)
	check("expired", first, false)
	update(func(tx *Tx) error { return tx.RenewLease(first, 30*time.Second) })
	check("renewed after it expired", first, true)
	second := Holder{Replica: "rg_a", Started: clk.Now()}
	update(func(tx *Tx) error { return tx.TakeLease(second, 30*time.Second) })
	check("a restart: the first run", first, false)
	check("a restart: the second run", second, true)
	refused := func(what string, h Holder) {
		t.Helper()
		err := st.Update(func(tx *Tx) error { return tx.RenewLease(h, 30*time.Second) })
		if proto.CodeOf(err) != proto.InvalidState {
			t.Errorf("%s: renewing %+v: %v, want INVALID_STATE", what, h, err)
		}
	}
	refused("the first run, still up after the restart", first)
	check("the first run's renewal after the restart: the first run", first, false)
	check("the first run's renewal after the restart: the second run", second, true)
	update(func(tx *Tx) error { return tx.ReleaseLease(first) })
	check("the first run's release leaves the second's lease", second, true)
	update(func(tx *Tx) error { return tx.ReleaseLease(second) })
	check("released", second, false)
	refused("released", second)
	check("a renewal after the release", second, false)
}
