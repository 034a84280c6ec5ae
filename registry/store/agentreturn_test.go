package store

import (
	"testing"
	"time"
)

// TestAgentReturnPerReplica: the return plans of two replicas and that of a registry
// alone on its store ("") are kept apart: each reads back its own, and one replica's
// plan is not another's that stored none.
func TestAgentReturnPerReplica(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		st, _ := openOnFakeClock(t, open)
		plans := map[string]AgentReturn{"rg_a": {Rate: 900, Admission: 128, Told: 3}, "rg_b": {Rate: 450, Admission: 64, Told: 1}, "": {Rate: 1200, Admission: 192}}
		err := st.Update(func(tx *Tx) error {
			for replica, plan := range plans {
				if err := tx.PutAgentReturn(replica, plan); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = st.View(func(tx *Tx) error {
			for replica, want := range plans {
				if got, ok, err := tx.AgentReturn(replica); err != nil || !ok || got != want {
					t.Errorf("plan of %q: %+v, %v, %v; want %+v", replica, got, ok, err, want)
				}
			}
			if got, ok, err := tx.AgentReturn("rg_c"); err != nil || ok {
				t.Errorf("plan of a replica that stored none: %+v, %v, %v; want none", got, ok, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestReturnPlansOfReplicasGoneArePruned: the daily prune deletes the return plan of a
// replica id that holds no lease once its last stop's stream ended a day ago (a replica
// id never started again: its lease pruned too), and keeps the plan of a replica that
// holds its lease however long ago it last stopped, of one that stopped and released
// its lease less than a day ago, and that of a registry alone on its store. Before, every
// replica id's plan was kept for ever.
func TestReturnPlansOfReplicasGoneArePruned(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		st, clk := openOnFakeClock(t, open)
		const ttl = 30 * time.Second
		running, gone := Holder{Replica: "rg_running", Started: clk.Now()}, Holder{Replica: "rg_gone", Started: clk.Now()}
		plan := func(stopped time.Time) AgentReturn {
			return AgentReturn{Rate: 900, Admission: 128, Told: 3, StoppedAt: stopped}
		}
		mustUpdate(t, st, func(tx *Tx) error {
			for _, h := range []Holder{running, gone} {
				if err := tx.TakeLease(h, ttl); err != nil {
					return err
				}
				if err := tx.PutAgentReturn(h.Replica, plan(clk.Now())); err != nil {
					return err
				}
			}
			return tx.PutAgentReturn("", plan(clk.Now()))
		})
		clk.Advance(LeaseRetention)
		lately := Holder{Replica: "rg_lately", Started: clk.Now()}
		mustUpdate(t, st, func(tx *Tx) error {
			if err := tx.TakeLease(lately, ttl); err != nil {
				return err
			}
			if err := tx.PutAgentReturn(lately.Replica, plan(clk.Now())); err != nil {
				return err
			}
			return tx.ReleaseLease(lately)
		})
		clk.Advance(LeaseRetention - time.Minute)
		mustUpdate(t, st, func(tx *Tx) error { return tx.RenewLease(running, ttl) })
		clk.Advance(ttl / 3)

		prune := func(want int, kept []string, pruned string) {
			t.Helper()
			if _, err := st.PruneOnward((*Tx).PruneReplicaLeases); err != nil {
				t.Fatal(err)
			}
			n, err := st.PruneOnward((*Tx).PruneAgentReturns)
			if err != nil || n != want {
				t.Fatalf("pruned %d return plans (%v), want %d, %s's", n, err, want, pruned)
			}
			mustUpdate(t, st, func(tx *Tx) error {
				if _, ok, err := tx.AgentReturn(pruned); err != nil || ok {
					t.Errorf("the plan of %s: kept %t (%v), want it pruned", pruned, ok, err)
				}
				for _, replica := range kept {
					if got, ok, err := tx.AgentReturn(replica); err != nil || !ok || got.Rate != 900 {
						t.Errorf("the plan of %q: %+v, kept %t (%v), want it kept", replica, got, ok, err)
					}
				}
				return tx.RenewLease(running, ttl)
			})
		}
		prune(1, []string{running.Replica, lately.Replica, ""}, gone.Replica)
		clk.Advance(LeaseRetention)
		prune(1, []string{running.Replica, ""}, lately.Replica)
	})
}
