package workflow

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// fleetRuns stores n running runs of one step on the harness's node, claimed by e, a
// few hundred a transaction, and returns what e drives: every one of them.
func fleetRuns(t *testing.T, h *harness, e *Engine, n int) map[string]context.CancelCauseFunc {
	t.Helper()
	driving := map[string]context.CancelCauseFunc{}
	for len(driving) < n {
		err := h.store.Update(func(tx *store.Tx) error {
			for range min(250, n-len(driving)) {
				run, err := tx.CreateRun(store.Run{Kind: "test", Node: h.node, Tenant: "acme", Document: []byte(`{}`),
					Profile: store.ProfileRef{Tenant: "acme", ID: "fleet", Version: 1}, Steps: []store.RunStep{{Phase: "main", Use: "power.getPower", On: "node"}}})
				if err != nil {
					return err
				}
				if _, err := tx.ClaimRun(run.ID, e.claimant(), e.cfg.Claims.TTL); err != nil {
					return err
				}
				driving[run.ID] = func(error) {}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return driving
}

// TestTheClaimsOfAFleetsRunsAreRenewed: on an etcd cluster of the defaults, an engine
// driving as many runs as a fleet-wide deploy or commissioning of 5,000 machines
// starts renews every one of their claims. Before, it renewed them all in one
// transaction, a write each, which etcd refused past 4,094 runs ("too large for
// one etcd transaction") at every renewal: every claim expired 30 s after its run last
// wrote, and another replica took the runs over while this one still drove them.
func TestTheClaimsOfAFleetsRunsAreRenewed(t *testing.T) {
	cfg := store.EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}
	h := newHarnessOn(t, nil, func(opts store.Options) (*store.Store, error) { return store.OpenEtcd(cfg, opts) })
	e := New(Config{Store: h.store, Clock: clock.NewFake(epoch), Relay: h.agent, Joins: h.joins, Backoff: backoff,
		Claims: &Claims{Owner: "a", TTL: 30 * time.Second}})
	driving := fleetRuns(t, h, e, 800)

	h.clock.Advance(10 * time.Second)
	lost, cancelled, err := e.renew(driving)
	if err != nil {
		t.Fatalf("renewing the claims of %d runs: %v", len(driving), err)
	}
	if len(lost) > 0 || len(cancelled) > 0 {
		t.Errorf("%d runs lost and %d cancelled, want none", len(lost), len(cancelled))
	}
	want := h.clock.Now().Add(30 * time.Second)
	err = h.store.View(func(tx *store.Tx) error {
		for id := range driving {
			c, ok, err := tx.RunClaim(id)
			if err != nil {
				return err
			}
			if !ok || !c.Expires.Equal(want) || c.Owner != "a" {
				t.Fatalf("run %s's claim %+v (held %t), want a's until %s", id, c, ok, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestClaimsAreRenewedWhileOtherRunsWrite: on etcd, an engine driving 2,000 runs renews
// their claims while another replica writes a run of its own without pause, as the other
// runs of a fleet's deploy do. Before, the renewal read more keys than etcd's 128
// compares, so each bucket it read compared its generation, and any write of any run
// conflicted with it: it met a conflict at each of its 50 tries, at every renewal, and
// every claim of the engine's expired.
func TestClaimsAreRenewedWhileOtherRunsWrite(t *testing.T) {
	cfg := store.EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}
	h := newHarnessOn(t, nil, func(opts store.Options) (*store.Store, error) { return store.OpenEtcd(cfg, opts) })
	e := New(Config{Store: h.store, Clock: clock.NewFake(epoch), Relay: h.agent, Joins: h.joins, Backoff: backoff,
		Claims: &Claims{Owner: "a", TTL: 30 * time.Second}})
	driving := fleetRuns(t, h, e, 2000)
	other, err := store.OpenEtcd(cfg, store.Options{Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var elsewhere string
	err = other.Update(func(tx *store.Tx) error {
		run, err := tx.CreateRun(store.Run{Kind: "test", Node: h.node, Tenant: "acme", Document: []byte(`{}`),
			Profile: store.ProfileRef{Tenant: "acme", ID: "fleet", Version: 1}, Steps: []store.RunStep{{Phase: "main", Use: "power.getPower", On: "node"}}})
		elsewhere = run.ID
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		for ; ; n++ {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			other.Update(func(tx *store.Tx) error {
				_, err := tx.UpdateRun(elsewhere, func(r *store.Run) error { r.BootID = fmt.Sprint(n); return nil })
				return err
			})
		}
	}()
	for range 3 {
		if _, _, err := e.renew(driving); err != nil {
			t.Errorf("renewing the claims of %d runs: %v", len(driving), err)
		}
	}
	close(stop)
	if n := <-done; n < 10 {
		t.Errorf("the other replica wrote its run %d times meanwhile, want it busy", n)
	}
}

// TestRenewalLeavesAnEndedRunAlone: a run that ended, and whose end released its claim,
// after the claim renewal read what its engine drives, is left without a claim by that
// renewal, on both backends; the other run's claim is renewed. Before, the renewal
// wrote the ended run's claim again, kept until the run was pruned.
func TestRenewalLeavesAnEndedRunAlone(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) func(store.Options) (*store.Store, error){
		"bbolt": func(t *testing.T) func(store.Options) (*store.Store, error) {
			dir := t.TempDir()
			return func(opts store.Options) (*store.Store, error) { return store.Open(dir, opts) }
		},
		"etcd": func(t *testing.T) func(store.Options) (*store.Store, error) {
			cfg := store.EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}
			return func(opts store.Options) (*store.Store, error) { return store.OpenEtcd(cfg, opts) }
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarnessOn(t, nil, open(t))
			e := New(Config{Store: h.store, Clock: h.clock, Relay: h.agent, Joins: h.joins, Backoff: backoff,
				Claims: &Claims{Owner: "a", TTL: 30 * time.Second}})
			driving := fleetRuns(t, h, e, 2)
			ended, going := slices.Sorted(maps.Keys(driving))[0], slices.Sorted(maps.Keys(driving))[1]
			err := h.store.Update(func(tx *store.Tx) error {
				if _, err := tx.UpdateRun(ended, func(r *store.Run) error { r.State = store.RunSucceeded; return nil }); err != nil {
					return err
				}
				return tx.ReleaseRun(ended, e.claimant())
			})
			if err != nil {
				t.Fatal(err)
			}
			h.clock.Advance(10 * time.Second)
			if lost, cancelled, err := e.renew(driving); err != nil || len(lost) > 0 || len(cancelled) > 0 {
				t.Fatalf("renewing: lost %v, cancelled %v, %v; want neither", lost, cancelled, err)
			}
			err = h.store.View(func(tx *store.Tx) error {
				if c, held, err := tx.RunClaim(ended); err != nil || held {
					t.Errorf("the ended run's claim: %+v (held %t, %v), want none", c, held, err)
				}
				c, held, err := tx.RunClaim(going)
				if want := h.clock.Now().Add(30 * time.Second); err != nil || !held || !c.Expires.Equal(want) {
					t.Errorf("the running run's claim: %+v (held %t, %v), want it renewed until %s", c, held, err, want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
