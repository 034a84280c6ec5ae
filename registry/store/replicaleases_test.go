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

// TestLeasesOfReplicasGoneArePruned: the daily prune deletes a lease that expired more
// than LeaseRetention ago (a replica id never started again), and keeps what a running
// replica needs: the lease of a replica renewing it, which holds, still renews, and keeps
// its site agent's session live; and a lease expired less than a day ago, whose run's
// end RanUntil still tells. Before, every replica id's lease was kept for ever.
func TestLeasesOfReplicasGoneArePruned(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		st, clk := openOnFakeClock(t, open)
		const ttl = 30 * time.Second
		running, gone := Holder{Replica: "rg_running", Started: clk.Now()}, Holder{Replica: "rg_gone", Started: clk.Now()}
		mustUpdate(t, st, func(tx *Tx) error {
			if err := tx.TakeLease(gone, ttl); err != nil {
				return err
			}
			if err := tx.TakeLease(running, ttl); err != nil {
				return err
			}
			return tx.OpenAgentSession("st_rack", "site", running, clk.Now())
		})
		clk.Advance(LeaseRetention)
		lately := Holder{Replica: "rg_lately", Started: clk.Now()}
		mustUpdate(t, st, func(tx *Tx) error { return tx.TakeLease(lately, ttl) })
		clk.Advance(LeaseRetention - time.Minute)
		mustUpdate(t, st, func(tx *Tx) error { return tx.RenewLease(running, ttl) })
		clk.Advance(ttl / 3)

		n, err := st.PruneOnward((*Tx).PruneReplicaLeases)
		if err != nil || n != 1 {
			t.Fatalf("pruned %d leases (%v), want the one expired a day ago", n, err)
		}
		mustUpdate(t, st, func(tx *Tx) error {
			var l ReplicaLease
			if ok, err := tx.get(bucketReplicaLeases, []byte(gone.Replica), &l); err != nil || ok {
				t.Errorf("the lease expired a day ago: kept %t (%v), want it pruned", ok, err)
			}
			if ran, err := tx.RanUntil(lately); err != nil || !ran.Equal(lately.Started.Add(ttl)) {
				t.Errorf("the lease expired within a day: the run ran until %s (%v), want %s", ran, err, lately.Started.Add(ttl))
			}
			s, _, err := tx.AgentSession("st_rack")
			if err != nil {
				return err
			}
			if live, err := s.Live(tx); err != nil || !live {
				t.Errorf("the running replica's site agent session: live %t (%v), want live", live, err)
			}
			return tx.RenewLease(running, ttl)
		})
	})
}
