package agentplane

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// TestPushesOutliveAStoreOutage: a registry over a three-member etcd cluster, 64 agents
// of one tenant holding a change for all in apply, 8 of the pushes deferred at the
// tenant's share. Two members stop, so the cluster has no majority and every read fails,
// and the held pushes are acknowledged: their places go to the deferred nodes, whose
// NodeSpecs the push workers cannot read. The workers read them again after a pause, and
// fail again; the members start again, and each deferred node's agent is sent its
// NodeSpec once and acknowledges it. The outage is logged once as an error however often
// the read failed, its end once, and the window comes back to zero. Before, the nodes
// whose read failed were dropped: their agents were sent nothing until their NodeSpec
// moved again or they reconnected.
func TestPushesOutliveAStoreOutage(t *testing.T) {
	const n = 64 // the window's first size
	cluster := etcdtest.Start(t)
	var logs records
	ca, server := newCA(t)
	e := startEnv(t, &env{t: t, ca: ca, server: server, dir: t.TempDir(), addr: "127.0.0.1:0",
		hooks: agents.Config{AckTimeout: time.Hour}, log: slog.New(&logs),
		open: func() (*store.Store, error) {
			// A short request timeout: a read fails 2 s after the majority went, not 10 s.
			return store.OpenEtcd(store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: "outage", Timeout: 2 * time.Second}, store.Options{})
		}})
	var g gate
	g.init()
	t.Cleanup(g.release)
	var mu sync.Mutex
	got := map[string][]int64{} // the generations each node's agent was sent
	for i := range n {
		e.startAgent(fmt.Sprintf("held-%02d", i), func(c *session.Config) {
			c.KeepAlive = 5 * time.Second
			c.Apply = func(ctx context.Context, spec proto.NodeSpec) error {
				mu.Lock()
				got[spec.Node] = append(got[spec.Node], spec.Generation)
				mu.Unlock()
				return holdApply(&g)(ctx, spec)
			}
		})
	}
	waitFor(t, "every agent connected", func() bool { return e.ep.Sessions() == n })
	w := deferChange(t, e, &g, n, "held-%02d")
	var deferred []string // their agents were sent nothing
	mu.Lock()
	for i := range n {
		if node := fmt.Sprintf("held-%02d", i); len(got[node]) == 0 {
			deferred = append(deferred, node)
		}
	}
	mu.Unlock()
	if len(deferred) != w.Deferred {
		t.Fatalf("%d agents sent nothing, window %+v: want the deferred ones", len(deferred), w)
	}

	cluster.Kill(1)
	cluster.Kill(2)
	restarted := false
	t.Cleanup(func() { // before the registry stops, which writes its return plan
		if !restarted {
			cluster.Restart(t, 1, 2)
		}
	})
	g.release() // the held pushes are acknowledged: their places go to the deferred nodes
	waitFor(t, "the deferred nodes' read to fail", func() bool { return logs.count(slog.LevelError, "read NodeSpecs to push") > 0 })
	waitUntil(t, "the deferred nodes read again, and failing again", 30*time.Second, 10*time.Millisecond, func() bool {
		return logs.count(slog.LevelDebug, "read NodeSpecs to push failed again") > 0
	})
	if w := e.ep.PushWindow(); w.InFlight != len(deferred) || w.Deferred != 0 {
		t.Fatalf("window %+v during the outage: want the %d deferred nodes holding the places handed to them", w, len(deferred))
	}
	cluster.Restart(t, 1, 2)
	restarted = true

	waitUntil(t, "the deferred nodes sent their NodeSpecs", 30*time.Second, 10*time.Millisecond, func() bool { return g.inside() == len(deferred) })
	g.release()
	for _, node := range deferred {
		waitFor(t, node+" acknowledged", func() bool { return e.status(node).ObservedGeneration == 1 })
	}
	mu.Lock()
	for _, node := range deferred {
		if !slices.Equal(got[node], []int64{1}) {
			t.Errorf("%s was sent generations %v, want [1]", node, got[node])
		}
	}
	mu.Unlock()
	waitWindowEmpty(t, e.ep)
	if w := e.ep.PushWindow(); w.Deferred != 0 {
		t.Fatalf("window %+v: want nothing deferred", w)
	}
	if errs := logs.count(slog.LevelError, "read NodeSpecs to push"); errs != 1 {
		t.Errorf("the outage logged %d errors of the push's reads, want 1 however often the read failed", errs)
	}
	if back := logs.count(slog.LevelInfo, "NodeSpec reads work again"); back != 1 {
		t.Errorf("the outage's end logged %d times, want once", back)
	}
}

// records is a slog.Handler that keeps the messages logged, with their level.
type records struct {
	mu   sync.Mutex
	msgs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Clone())
	return nil
}

func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// count is how many records of level begin with prefix.
func (r *records) count(level slog.Level, prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.msgs {
		if rec.Level == level && strings.HasPrefix(rec.Message, prefix) {
			n++
		}
	}
	return n
}
