package agentplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/workflow"
)

// TestPushesOutliveAStoreOutage: a registry over a three-member etcd cluster, 64 agents
// of one tenant holding a change for all in apply, 8 of the pushes deferred at the
// tenant's share. Two members stop, so the cluster has no majority and every read fails,
// and the held pushes are acknowledged: their places go to the deferred nodes, whose
// NodeSpecs the push workers cannot read. The workers read them again after a pause, and
// fail again; the members start again, and each deferred node's agent is sent its
// NodeSpec once and acknowledges it. The outage is logged once as an error however often
// the read failed, its end once, every failed read is counted (Endpoint.Pushes, the
// metric better_compute_agent_nodespec_read_failures_total), and the window comes back to
// zero. Before, the nodes
// whose read failed were dropped: their agents were sent nothing until their NodeSpec
// moved again or they reconnected.
func TestPushesOutliveAStoreOutage(t *testing.T) {
	const n = 64 // the window's first size
	e, cluster, logs, hellos := outageEnv(t)
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
	waitFor(t, "every agent connected, its hello recorded", func() bool { return e.ep.Sessions() == n && hellos.Load() >= n })
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

	back := majorityLost(t, cluster)
	g.release() // the held pushes are acknowledged: their places go to the deferred nodes
	waitFor(t, "the deferred nodes' read to fail", func() bool { return logs.count(slog.LevelError, "read NodeSpecs to push") > 0 })
	waitUntil(t, "the deferred nodes read again, and failing again", 30*time.Second, 10*time.Millisecond, func() bool {
		return logs.count(slog.LevelDebug, "read NodeSpecs to push failed again") > 0
	})
	if w := e.ep.PushWindow(); w.InFlight != len(deferred) || w.Deferred != 0 {
		t.Fatalf("window %+v during the outage: want the %d deferred nodes holding the places handed to them", w, len(deferred))
	}
	back()

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
	failed := logs.count(slog.LevelError, "read NodeSpecs to push") + logs.count(slog.LevelDebug, "read NodeSpecs to push failed again")
	if got := e.ep.Pushes().ReadFailures; got != int64(failed) || got < 2 {
		t.Errorf("%d failed reads counted, want the %d logged (at least 2)", got, failed)
	}
}

// TestAcknowledgementsOutliveAStoreOutage: 8 agents hold a NodeSpec in apply; two of the
// three etcd members stop, so the store has no majority, and the agents finish applying
// it and acknowledge it, which the registry cannot record: 4 applied it, 4 failed to.
// Once the members are back, without any further change of the NodeSpecs, every node's
// recorded observedGeneration reaches the generation its agent applied, and no such agent
// is sent it again; the failures are recorded (their agents are sent the NodeSpec again,
// and fail again). Before, the registry logged the failed writes and went on: the nodes
// kept generation 0 and no failure until their agents' next session or their NodeSpecs'
// next change.
func TestAcknowledgementsOutliveAStoreOutage(t *testing.T) {
	const n = 8
	e, cluster, logs, hellos := outageEnv(t)
	var g gate
	g.init()
	t.Cleanup(g.release)
	var mu sync.Mutex
	applies := map[string]int{}
	failing := func(node string) bool { return node >= "acked-04" }
	for i := range n {
		e.startAgent(fmt.Sprintf("acked-%02d", i), func(c *session.Config) {
			c.Apply = func(ctx context.Context, spec proto.NodeSpec) error {
				mu.Lock()
				applies[spec.Node]++
				first := applies[spec.Node] == 1
				mu.Unlock()
				if first {
					if err := holdApply(&g)(ctx, spec); err != nil {
						return err
					}
				}
				if failing(spec.Node) {
					return errors.New("the GPU driver would not load")
				}
				return nil
			}
		})
	}
	waitFor(t, "every agent connected, its hello recorded", func() bool { return e.ep.Sessions() == n && hellos.Load() >= n })
	setSpecs(t, e.st, n, "acked-%02d")
	waitFor(t, "every agent applying generation 1", func() bool { return g.inside() == n })

	back := majorityLost(t, cluster)
	g.release()
	waitUntil(t, "every acknowledgement failed to be recorded", 30*time.Second, 10*time.Millisecond, func() bool {
		return logs.count(slog.LevelError, "agent acknowledgement not recorded")+logs.count(slog.LevelError, "agent apply failure not recorded") >= n
	})
	back()

	for i := range n {
		node := fmt.Sprintf("acked-%02d", i)
		waitUntil(t, node+"'s acknowledgement recorded", 30*time.Second, 10*time.Millisecond, func() bool {
			st := e.status(node)
			if failing(node) {
				return st.FailedGeneration == 1 && st.ApplyError != nil
			}
			return st.ObservedGeneration == 1
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		node := fmt.Sprintf("acked-%02d", i)
		if st := e.status(node); failing(node) && (st.ObservedGeneration != 0 || applies[node] < 2) {
			t.Errorf("%s failed to apply generation 1: status %+v after %d applies, want generation 0 and the NodeSpec sent again", node, st, applies[node])
		} else if !failing(node) && applies[node] != 1 {
			t.Errorf("%s applied generation 1 %d times, want once", node, applies[node])
		}
	}
}

// TestInventoryOutlivesAStoreOutage: 8 agents are connected when two of the three etcd
// members stop; each sends an inventory section the registry cannot record. Once the
// members are back, every node's section is stored as its agent sent it, without the
// agent sending it again. Before, the registry logged the failed write and went on: the
// section was stored only if the agent sent it again (a change, or its next session).
func TestInventoryOutlivesAStoreOutage(t *testing.T) {
	const n = 8
	e, cluster, logs, hellos := outageEnv(t)
	agents := make([]*agent, n)
	for i := range agents {
		agents[i] = e.startAgent(fmt.Sprintf("inv-%02d", i), nil)
	}
	waitFor(t, "every agent connected, its hello recorded", func() bool { return e.ep.Sessions() == n && hellos.Load() >= n })

	back := majorityLost(t, cluster)
	for i, a := range agents {
		a.SetInventory("system", raw(fmt.Sprintf(`{"cpus":%d}`, i+1)))
	}
	waitUntil(t, "every section failed to be recorded", 30*time.Second, 10*time.Millisecond, func() bool {
		return logs.count(slog.LevelError, "agent inventory section not recorded") >= n
	})
	back()

	for i := range n {
		node, want := fmt.Sprintf("inv-%02d", i), raw(fmt.Sprintf(`{"cpus":%d}`, i+1))
		waitUntil(t, node+"'s section recorded", 30*time.Second, 10*time.Millisecond, func() bool {
			return bytes.Equal(e.section(node, "system"), want)
		})
	}
}

// section is the inventory section of node as stored, nil when none is.
func (e *env) section(node, name string) json.RawMessage {
	var data json.RawMessage
	e.st.View(func(tx *store.Tx) error {
		secs, err := tx.Inventory(node)
		for _, s := range secs {
			if s.Section == name {
				data = s.Data
			}
		}
		return err
	})
	return data
}

// outageEnv is a registry over a three-member etcd cluster, whose reads and writes fail
// 2 s after the majority went (a short request timeout, not 10 s) and whose pushes wait
// an hour for their acknowledgement, what it logs, and how many hellos it recorded: a
// test waits for its agents' hellos to be recorded before the majority goes (an agent
// counted in Endpoint.Sessions may still have its hello's transaction under way, and one
// failed would take what the agent then says into its next hello).
func outageEnv(t *testing.T) (*env, *etcdtest.Cluster, *records, *atomic.Int64) {
	t.Helper()
	cluster := etcdtest.Start(t)
	logs := &records{}
	hellos := &atomic.Int64{}
	ca, server := newCA(t)
	e := startEnv(t, &env{t: t, ca: ca, server: server, dir: t.TempDir(), addr: "127.0.0.1:0",
		hooks: agents.Config{AckTimeout: time.Hour, OnSession: func(string, proto.Role, time.Time, string) error { hellos.Add(1); return nil }}, log: slog.New(logs),
		open: func() (*store.Store, error) {
			return store.OpenEtcd(store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: "outage", Timeout: 2 * time.Second}, store.Options{})
		}})
	return e, cluster, logs, hellos
}

// majorityLost stops two of the cluster's three members, and starts them again when the
// test ends if the test did not (before the registry stops, which writes its return
// plan); back starts them.
func majorityLost(t *testing.T, cluster *etcdtest.Cluster) (back func()) {
	cluster.Kill(1)
	cluster.Kill(2)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			cluster.Restart(t, 1, 2)
		}
	})
	return func() { cluster.Restart(t, 1, 2); restarted = true }
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
	return len(r.matching(level, prefix))
}

// matching are the records of level that begin with prefix, each as its attributes'
// values by key.
func (r *records) matching(level slog.Level, prefix string) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, rec := range r.msgs {
		if rec.Level == level && strings.HasPrefix(rec.Message, prefix) {
			attrs := map[string]string{}
			rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
			out = append(out, attrs)
		}
	}
	return out
}

// TestJoinsOutliveAStoreOutage: three agents say hello to a registry over a three-member
// etcd cluster, whose majority stops after the hellos were read and before their sessions
// are recorded: the installed OS of a machine that rebooted (a boot other than the one a
// wait for its return began in), the installed OS of a machine that did not (the same
// boot as that wait's), and a site agent. None of the records is written. Once the
// members are back, without the agents being restarted, the machines' joins are recorded
// with their hellos' boot ids (the rebooted machine's ends the wait for its return; the
// other's does not, as its lost join would not have) and the site agent's session is
// recorded open. Before, the registry logged the failed records and kept the sessions:
// nothing was recorded until the agents' next sessions, and the wait ran to its timeout.
func TestJoinsOutliveAStoreOutage(t *testing.T) {
	const waitedBoot, nextBoot = "0b1e7a52-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "9f8e7d6c-5b4a-4321-8fed-cba987654321"
	const agentsOut = 3
	cluster := etcdtest.Start(t)
	logs := &records{}
	var mu sync.Mutex
	var back func()
	var once sync.Once
	hellos, lost := 0, make(chan struct{})
	release := func() { once.Do(func() { close(lost) }) }
	ca, server := newCA(t)
	e := startEnv(t, &env{t: t, ca: ca, server: server, dir: t.TempDir(), addr: "127.0.0.1:0", log: slog.New(logs),
		recordSessions: true, recordsMayFail: true,
		hooks: agents.Config{OnSession: func(string, proto.Role, time.Time, string) error {
			// Called after each hello was read and before its session is recorded: the
			// majority goes once the three hellos are here.
			mu.Lock()
			if hellos++; hellos == agentsOut {
				back = majorityLost(t, cluster)
				release()
			}
			mu.Unlock()
			<-lost
			return nil
		}},
		open: func() (*store.Store, error) {
			return store.OpenEtcd(store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: "joins", Timeout: 2 * time.Second}, store.Options{})
		}})
	t.Cleanup(release) // before the endpoint stops: no hello waits in the hook then
	joins := workflow.NewJoinLog(e.st, store.Holder{})
	for _, node := range []string{"rebooted", "same-boot"} {
		if err := joins.Joined(node, "node", waitedBoot); err != nil {
			t.Fatal(err)
		}
	}
	joined := func(node string) store.AgentJoin {
		var j store.AgentJoin
		e.st.View(func(tx *store.Tx) error { all, err := tx.AgentJoins(node); j = all["node"]; return err })
		return j
	}
	since := joined("same-boot").JoinedAt.Add(time.Nanosecond) // the waits began after the joins of the waited boot
	waits := map[string]chan error{}
	for _, node := range []string{"rebooted", "same-boot"} {
		done := make(chan error, 1)
		waits[node] = done
		go func() { done <- joins.WaitJoined(t.Context(), node, "node", since, waitedBoot) }()
	}

	e.startAgent("rebooted", func(c *session.Config) { c.BootID = nextBoot })
	e.startAgent("same-boot", func(c *session.Config) { c.BootID = waitedBoot })
	site, err := e.ca.AgentCertificate("rack-a", string(proto.RoleSite))
	if err != nil {
		t.Fatal(err)
	}
	e.startAgent("rack-a", func(c *session.Config) { c.Certificate = site })
	select {
	case <-lost:
	case <-time.After(20 * time.Second):
		t.Fatal("the agents' hellos did not come")
	}
	waitUntil(t, "every session failed to be recorded", 30*time.Second, 10*time.Millisecond, func() bool {
		return logs.count(slog.LevelError, "agent session not recorded") >= agentsOut
	})
	mu.Lock()
	back()
	mu.Unlock()

	select {
	case err := <-waits["rebooted"]:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the rebooted machine's agent is connected and the wait for its return goes on: its join was not recorded")
	}
	if j := joined("rebooted"); j.BootID != nextBoot {
		t.Errorf("the rebooted machine's join recorded the boot %q, want %q", j.BootID, nextBoot)
	}
	waitUntil(t, "the same boot's join recorded", 30*time.Second, 10*time.Millisecond, func() bool {
		j := joined("same-boot")
		return !j.JoinedAt.Before(since) && j.BootID == waitedBoot
	})
	waitUntil(t, "the site agent's session recorded", 30*time.Second, 10*time.Millisecond, func() bool {
		var s store.AgentSession
		e.st.View(func(tx *store.Tx) (err error) { s, _, err = tx.AgentSession("rack-a"); return err })
		return s.Connected && s.Role == string(proto.RoleSite)
	})
	select {
	case err := <-waits["same-boot"]:
		t.Errorf("the session of the boot the wait began in, recorded again, ended the wait (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
}
