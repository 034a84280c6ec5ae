package registry

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/registry/workflow"
)

// gone is a metal.Presence in which no node agent has a session.
type gone struct{}

func (gone) NodeAgentConnected(*store.Tx, string) bool { return false }

// TestRemediationRunsOnTheClock: the registry's remediation loop checks at once and
// then every remediationInterval of its clock, so an active node of a pool with
// policy.remediation.agentGoneAfter whose agent stays gone is remediated one interval
// after the first check found it gone.
func TestRemediationRunsOnTheClock(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	st := storetest.Open(t, store.Options{Now: clk.Now})
	engine := workflow.New(workflow.Config{Store: st, Clock: clk})
	svc := metal.New(metal.Config{Store: st, Engine: engine, Presence: gone{}})
	var node store.Node
	err := st.Update(func(tx *store.Tx) (err error) {
		if _, err = tx.CreateTenant("acme"); err != nil {
			return err
		}
		if _, err = tx.CreateSite("rack-a"); err != nil {
			return err
		}
		policy := store.PoolPolicy{Remediation: &store.RemediationPolicy{AgentGoneAfter: "1m"}}
		if _, err = tx.CreatePool(store.Pool{Tenant: "acme", Name: "gpu", Site: "rack-a", Policy: policy}); err != nil {
			return err
		}
		if node, err = tx.CreateNode(store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}, State: store.NodeActive}); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := startRemediation(context.Background(), clk, svc, slog.New(slog.DiscardHandler))
	defer stop()
	state := func() string {
		var n store.Node
		st.View(func(tx *store.Tx) (err error) { n, err = tx.Node(node.ID); return err })
		return n.State
	}
	clk.BlockUntil(1) // the first check ran and found the agent gone
	if s := state(); s != store.NodeActive {
		t.Fatalf("remediated at the first check: %s", s)
	}
	clk.Advance(remediationInterval)
	for deadline := time.Now().Add(10 * time.Second); state() != store.NodeRemediating; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("one interval later the node is %s, want remediating", state())
		}
	}
}

// TestHousekeepingPrunesOldEvents: an event older than store.EventMaxAge is gone after
// the housekeeping pass that follows on the registry's clock; a newer one stays.
func TestHousekeepingPrunesOldEvents(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	st := storetest.Open(t, store.Options{Now: clk.Now})
	appendEvent := func() {
		err := st.Update(func(tx *store.Tx) error {
			_, err := tx.AppendEvent(store.Event{Node: "nd_1", Tenant: "acme", Kind: store.EventNodeState, To: store.NodeReady})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	seqs := func() (out []uint64) {
		st.View(func(tx *store.Tx) error {
			evs, _, err := tx.Events("nd_1", "", store.Page{})
			for _, e := range evs {
				out = append(out, e.Seq)
			}
			return err
		})
		return out
	}
	appendEvent()
	clk.Advance(store.EventMaxAge - housekeepingInterval/2)
	appendEvent()
	stop := startHousekeeping(context.Background(), clk, st, slog.New(slog.DiscardHandler))
	defer stop()
	clk.BlockUntil(1)
	if got := seqs(); len(got) != 2 {
		t.Fatalf("events before any is too old: %v", got)
	}
	clk.Advance(housekeepingInterval)
	for deadline := time.Now().Add(10 * time.Second); len(seqs()) != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("events one pass later: %v, want only seq 2", seqs())
		}
	}
	if got := seqs(); got[0] != 2 {
		t.Fatalf("kept %v, want seq 2", got)
	}
}

// TestHousekeepingForgetsDayOldCommands: a relayed command is forgotten by the first
// housekeeping pass after it is agents.CommandTTL old, while the registry keeps running;
// a younger one, pending or answered, stays.
func TestHousekeepingForgetsDayOldCommands(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	st := storetest.Open(t, store.Options{Now: clk.Now})
	enqueue := func(node, id string) {
		err := st.Update(func(tx *store.Tx) error {
			_, err := tx.EnqueueAgentCommand(node, proto.RoleRamdisk, proto.Command{ID: id, Kind: "disk.wipe"}, nil)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	kept := func() (out []string) {
		st.View(func(tx *store.Tx) error {
			for _, c := range []struct{ node, id string }{{"nd_1", "old"}, {"nd_1", "young"}, {"nd_2", "answered"}} {
				if _, err := tx.AgentCommand(c.node, c.id); err == nil {
					out = append(out, c.id)
				}
			}
			return nil
		})
		return out
	}
	enqueue("nd_1", "old")
	stop := startHousekeeping(context.Background(), clk, st, slog.New(slog.DiscardHandler))
	defer stop()
	clk.BlockUntil(1) // the first pass ran, and its timer waits
	clk.Advance(housekeepingInterval / 2)
	enqueue("nd_1", "young")
	enqueue("nd_2", "answered")
	if err := st.Update(func(tx *store.Tx) error {
		_, err := tx.CompleteAgentCommand("nd_2", proto.Result{ID: "answered", Result: json.RawMessage(`{}`)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := kept(); len(got) != 3 {
		t.Fatalf("commands before any is CommandTTL old: %v", got)
	}
	// The next pass comes when "old" is past CommandTTL, the others half of it younger.
	clk.Advance(agents.CommandTTL - housekeepingInterval/2 + time.Hour)
	for deadline := time.Now().Add(10 * time.Second); len(kept()) != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("commands one pass after \"old\" is CommandTTL old: %v, want young and answered", kept())
		}
	}
	if got := kept(); got[0] != "young" || got[1] != "answered" {
		t.Fatalf("kept %v, want young and answered", got)
	}
}

// TestHousekeepingPrunesFinishedRuns: a finished workflow run is pruned by the first
// housekeeping pass after it ended store.RunRetention ago, on the registry's clock; the
// node's last run, which its record names, stays. Before, every run was kept for ever.
func TestHousekeepingPrunesFinishedRuns(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	st := storetest.Open(t, store.Options{Now: clk.Now})
	var node store.Node
	err := st.Update(func(tx *store.Tx) (err error) {
		if _, err = tx.CreateTenant("acme"); err != nil {
			return err
		}
		if _, err = tx.CreateSite("rack-a"); err != nil {
			return err
		}
		if _, err = tx.CreatePool(store.Pool{Tenant: "acme", Name: "gpu", Site: "rack-a"}); err != nil {
			return err
		}
		node, err = tx.CreateNode(store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}, State: store.NodeReady})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 2 {
		err := st.Update(func(tx *store.Tx) error {
			r, err := tx.CreateRun(store.Run{Kind: "inspect", Node: node.ID, Document: json.RawMessage(`{}`), Steps: []store.RunStep{{Phase: "main"}}})
			if err != nil {
				return err
			}
			if _, err = tx.UpdateRun(r.ID, func(r *store.Run) error { r.State = store.RunSucceeded; return nil }); err != nil {
				return err
			}
			ids = append(ids, r.ID)
			_, err = tx.UpdateNode(node.ID, func(n *store.Node) error { n.Workflow = r.ID; return nil })
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	kept := func() (out []string) {
		st.View(func(tx *store.Tx) error {
			for _, id := range ids {
				if _, err := tx.Run(id); err == nil {
					out = append(out, id)
				}
			}
			return nil
		})
		return out
	}
	stop := startHousekeeping(context.Background(), clk, st, slog.New(slog.DiscardHandler))
	defer stop()
	clk.BlockUntil(1) // the first pass ran, and its timer waits
	if got := kept(); len(got) != 2 {
		t.Fatalf("runs before either ended a retention ago: %v", got)
	}
	// The pass that comes once both ended more than a retention ago.
	clk.Advance(store.RunRetention + housekeepingInterval)
	for deadline := time.Now().Add(10 * time.Second); len(kept()) != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("runs a pass after both ended a retention ago: %v, want only the node's last, %s", kept(), ids[1])
		}
	}
	if got := kept(); got[0] != ids[1] {
		t.Fatalf("kept %v, want the node's last run %s", got, ids[1])
	}
}

// TestHousekeepingPrunesCredentialsAndLeases: a credential revoked and the lease and
// return plan of a replica id that never started again are gone one housekeeping pass
// after their retention (store.CredentialRetention, store.LeaseRetention,
// store.AgentReturnRetention), on the registry's clock, while the usable credential and
// the lease and plan of this running registry, renewed, stay. Before, all were kept for
// ever.
func TestHousekeepingPrunesCredentialsAndLeases(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	st := storetest.Open(t, store.Options{Now: clk.Now})
	gone, running := store.Holder{Replica: "rg_gone", Started: clk.Now()}, store.Holder{Replica: "rg_running", Started: clk.Now()}
	var revoked, usable store.Credential
	err := st.Update(func(tx *store.Tx) (err error) {
		if _, err := tx.CreateTenant("acme"); err != nil {
			return err
		}
		if revoked, _, err = tx.CreateCredential("acme", []string{"compute:profiles:read"}, time.Time{}); err != nil {
			return err
		}
		if _, err := tx.RevokeCredential(revoked.ID); err != nil {
			return err
		}
		if usable, _, err = tx.CreateCredential("acme", []string{"compute:profiles:read"}, time.Time{}); err != nil {
			return err
		}
		for _, h := range []store.Holder{gone, running} {
			if err := tx.TakeLease(h, leaseTTL); err != nil {
				return err
			}
			if err := tx.PutAgentReturn(h.Replica, store.AgentReturn{Rate: 900, Admission: 128, Told: 3, StoppedAt: clk.Now()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	renew := func() error {
		return st.Update(func(tx *store.Tx) error { return tx.RenewLease(running, leaseTTL) })
	}
	stop := startHousekeeping(context.Background(), clk, st, slog.New(slog.DiscardHandler))
	defer stop()
	// A pass a day, the running registry renewing its lease meanwhile (here once a day,
	// as often as a pass needs to find it expired less than a day ago).
	for clk.Now().Before(gone.Started.Add(store.CredentialRetention + housekeepingInterval)) {
		clk.BlockUntil(1)
		if err := renew(); err != nil {
			t.Fatalf("renewing the running registry's lease on %s: %v", clk.Now(), err)
		}
		clk.Advance(housekeepingInterval)
	}
	clk.BlockUntil(1)
	err = st.View(func(tx *store.Tx) error {
		if _, err := tx.Credential(revoked.ID); proto.CodeOf(err) != proto.NotFound {
			t.Errorf("the credential revoked a retention ago: %v, want it pruned (NOT_FOUND)", err)
		}
		if ran, err := tx.RanUntil(gone); err != nil || !ran.IsZero() {
			t.Errorf("the lease of a replica gone: its run ran until %s (%v), want the lease pruned", ran, err)
		}
		if _, ok, err := tx.AgentReturn(gone.Replica); err != nil || ok {
			t.Errorf("the return plan of a replica gone: kept %t (%v), want it pruned", ok, err)
		}
		if _, err := tx.Credential(usable.ID); err != nil {
			t.Errorf("the usable credential: %v, want it kept", err)
		}
		if _, ok, err := tx.AgentReturn(running.Replica); err != nil || !ok {
			t.Errorf("the return plan of the running registry: kept %t (%v), want it kept", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := renew(); err != nil {
		t.Errorf("the running registry renewing its lease after the passes: %v", err)
	}
}
