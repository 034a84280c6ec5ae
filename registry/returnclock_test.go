package registry

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// TestAStopIsDatedByTheRegistrysClock: a replica on etcd whose clock is 60 days behind
// the real time (as the tests that let days pass run it) stops; the return plan it
// stores dates the stop by that clock, as the store dates everything else, and a prune a
// retention later by that clock (store.MaxReturnDelay and store.AgentReturnRetention)
// deletes the plan of the replica, which holds no lease once stopped. Before, the
// endpoint dated the stop with the real time, 60 days after the registry's, and the plan
// outlived its retention by as much.
func TestAStopIsDatedByTheRegistrysClock(t *testing.T) {
	cluster := etcdtest.Start(t)
	sc := StoreConfig{Backend: "etcd", EtcdEndpoints: cluster.Endpoints}
	clk := newShiftedClock(-busyPast)
	r := newTestRegistry(t, Config{Store: sc, Clock: clk, KEKFile: filepath.Join(t.TempDir(), "kek")})
	replica := r.holder.Replica
	before := clk.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	after := clk.Now()
	later := func() time.Time {
		return clk.Now().Add(store.MaxReturnDelay + store.AgentReturnRetention + time.Minute)
	}
	st, err := sc.openStore("", store.Options{Now: later})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	plan := func() (p store.AgentReturn, ok bool) {
		if err := st.View(func(tx *store.Tx) (err error) { p, ok, err = tx.AgentReturn(replica); return err }); err != nil {
			t.Fatal(err)
		}
		return p, ok
	}
	if p, ok := plan(); !ok || p.StoppedAt.Before(before) || p.StoppedAt.After(after) {
		t.Fatalf("the stopped replica's plan (stored %t) dates its stop %s, want between %s and %s by the registry's clock", ok, p.StoppedAt, before, after)
	}
	if err := st.Update(func(tx *store.Tx) error { _, _, err := tx.PruneAgentReturns(nil); return err }); err != nil {
		t.Fatal(err)
	}
	if p, ok := plan(); ok {
		t.Errorf("the plan of a stop a retention ago by the registry's clock is kept (its stop dated %s)", p.StoppedAt)
	}
}
