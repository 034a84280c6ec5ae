package agentplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/quic-go/quic-go"
)

// holdApply is an Apply that waits for g's next release, or for the agent's end.
func holdApply(g *gate) func(context.Context, proto.NodeSpec) error {
	return func(ctx context.Context, _ proto.NodeSpec) error {
		released := make(chan struct{})
		go func() { g.wait(); close(released) }()
		select {
		case <-released:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitWindowEmpty waits for the endpoint's push window to hold no push and no waiter.
func waitWindowEmpty(t *testing.T, ep *agents.Endpoint) {
	t.Helper()
	waitFor(t, "the push window back to zero", func() bool {
		w := ep.PushWindow()
		return w.InFlight == 0 && w.Waiting == 0
	})
}

// TestPushWindowReleases pushes NodeSpecs that end in every way a push ends and checks
// that each gives its place in the window back: a slot leaked would stall later pushes.
func TestPushWindowReleases(t *testing.T) {
	e := newEnv(t, agents.Config{})

	t.Run("acknowledged", func(t *testing.T) {
		e.setSpec("acked", nil)
		e.startAgent("acked", nil)
		waitFor(t, "the ack", func() bool { return e.status("acked").ObservedGeneration == 1 })
		waitWindowEmpty(t, e.ep)
	})
	t.Run("acknowledged with an error", func(t *testing.T) {
		e.setSpec("refuses", nil)
		e.startAgent("refuses", func(c *session.Config) {
			c.Apply = func(context.Context, proto.NodeSpec) error { return errors.New("disk full") }
		})
		waitFor(t, "the failed ack", func() bool { return e.status("refuses").FailedGeneration == 1 })
		waitWindowEmpty(t, e.ep)
	})
	t.Run("superseded by a newer generation", func(t *testing.T) {
		var g gate
		g.init()
		e.setSpec("slow", nil)
		e.startAgent("slow", func(c *session.Config) { c.Apply = holdApply(&g) })
		waitFor(t, "the first push", func() bool { return e.ep.PushWindow().InFlight == 1 })
		pushed := e.ep.Pushes().Pushed
		e.setSpec("slow", map[string]string{"round": "2"})
		waitFor(t, "the newer push", func() bool { return e.ep.Pushes().Pushed == pushed+1 })
		if got := e.ep.PushWindow().InFlight; got != 1 {
			t.Fatalf("%d pushes in flight for one agent, want 1: the newer push takes the older one's place", got)
		}
		g.release()
		waitFor(t, "generation 2 in apply", func() bool { return g.inside() == 1 })
		g.release()
		waitFor(t, "generation 2 applied", func() bool { return e.status("slow").ObservedGeneration == 2 })
		waitWindowEmpty(t, e.ep)
	})
	t.Run("session ends mid-push", func(t *testing.T) {
		var g gate
		g.init()
		defer g.release()
		e.setSpec("leaves", nil)
		_, stop := e.runAgent("leaves", func(c *session.Config) { c.Apply = holdApply(&g) })
		waitFor(t, "the push", func() bool { return e.ep.PushWindow().InFlight == 1 })
		stop()
		waitWindowEmpty(t, e.ep)
	})
	t.Run("write fails", func(t *testing.T) {
		// An agent that stops reading its session stream: the registry's next write on
		// it fails (STOP_SENDING), and the session ends.
		conn, stream := sessionOverQUIC(t, e, "deaf", proto.Hello{})
		waitFor(t, "deaf connected", func() bool { return e.ep.Connected("deaf", proto.RoleNode) })
		stream.CancelRead(0)
		time.Sleep(300 * time.Millisecond) // for the STOP_SENDING to arrive
		pushed := e.ep.Pushes().Pushed
		e.setSpec("deaf", nil)
		select {
		case <-conn.Context().Done():
		case <-time.After(20 * time.Second):
			t.Fatal("the registry kept the session after its push failed")
		}
		if ae, ok := errors.AsType[*quic.ApplicationError](context.Cause(conn.Context())); !ok || ae.ErrorMessage != "NodeSpec push failed" {
			t.Fatalf("session closed with %v, want the failed push", context.Cause(conn.Context()))
		}
		waitWindowEmpty(t, e.ep)
		if got := e.ep.Pushes().Pushed; got != pushed {
			t.Fatalf("%d pushes counted, want none: the write failed", got-pushed)
		}
	})
	t.Run("many sessions end mid-push", func(t *testing.T) {
		// 120 agents, more than the window's 64 places, half of them stopping at random
		// moments while a change for all is pushed and acknowledged.
		const n = 120
		stops := make([]func(), n)
		for i := range n {
			node := fmt.Sprintf("fleet-%03d", i)
			_, stops[i] = e.runAgent(node, func(c *session.Config) {
				c.KeepAlive = 5 * time.Second
				c.Apply = func(ctx context.Context, _ proto.NodeSpec) error {
					select { // an apply of up to 50 ms
					case <-time.After(time.Duration(rand.IntN(50)) * time.Millisecond):
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}
			})
		}
		var wg sync.WaitGroup
		for i := 0; i < n; i += 2 {
			wg.Go(func() {
				time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
				stops[i]()
			})
		}
		setSpecs(t, e.st, n, "fleet-%03d")
		wg.Wait()
		for i := 1; i < n; i += 2 {
			node := fmt.Sprintf("fleet-%03d", i)
			waitFor(t, node+" applied", func() bool { return e.status(node).ObservedGeneration == 1 })
			defer stops[i]()
		}
		waitWindowEmpty(t, e.ep)
	})
}

// TestPushWindowTimeout pushes to an agent that never acknowledges: the push gives its
// place back after the ack timeout, and counts as late.
func TestPushWindowTimeout(t *testing.T) {
	e := newEnv(t, agents.Config{AckTimeout: 300 * time.Millisecond})
	var g gate
	g.init()
	defer g.release()
	e.setSpec("stuck", nil)
	e.startAgent("stuck", func(c *session.Config) { c.Apply = holdApply(&g) })
	waitFor(t, "the push", func() bool { return e.ep.Pushes().Pushed == 1 })
	waitWindowEmpty(t, e.ep)
	if w := e.ep.PushWindow(); w.Late != 1 || w.Halvings != 1 {
		t.Fatalf("window %+v: want the timed-out push counted late and the window halved", w)
	}
	if !e.ep.Connected("stuck", proto.RoleNode) {
		t.Fatal("the session of an agent slow to apply was ended")
	}
}

// TestPushWindowSmallerThanFleet pushes a change for 300 agents, who acknowledge it
// all, while the window holds fewer pushes than that at any moment.
func TestPushWindowSmallerThanFleet(t *testing.T) {
	const n = 300
	e := newEnv(t, agents.Config{})
	for i := range n {
		e.startAgent(fmt.Sprintf("many-%03d", i), func(c *session.Config) { c.KeepAlive = 5 * time.Second })
	}
	waitFor(t, "every agent connected", func() bool { return e.ep.Sessions() == n })
	setSpecs(t, e.st, n, "many-%03d")
	for i := range n {
		node := fmt.Sprintf("many-%03d", i)
		waitFor(t, node+" applied", func() bool { return e.status(node).ObservedGeneration == 1 })
	}
	waitWindowEmpty(t, e.ep)
	w := e.ep.PushWindow()
	if w.MaxInFlight >= n || w.MaxInFlight == 0 {
		t.Fatalf("at most %d pushes in flight for %d agents, want some and fewer than the fleet", w.MaxInFlight, n)
	}
	if got := e.ep.Pushes().Pushed; got != n {
		t.Fatalf("%d pushes, want one for each of %d agents", got, n)
	}
	// Every session's path is summarised, each with a probe timeout from its samples.
	p := e.ep.Paths()
	if p.Sessions != n || p.PacketsSent < n || p.ProbeTimeoutMedian <= 0 || p.ProbeTimeoutMax < p.ProbeTimeoutP99 || p.ProbeTimeoutP99 < p.ProbeTimeoutMedian {
		t.Fatalf("paths %+v: want %d sessions, their packets and ordered probe timeouts", p, n)
	}
	t.Logf("window: %+v; paths: %+v", w, p)
}

// setSpecs sets a NodeSpec for nodes 0..n-1 named by format, in one transaction.
func setSpecs(t *testing.T, st *store.Store, n int, format string) {
	t.Helper()
	err := st.Update(func(tx *store.Tx) error {
		for i := range n {
			if _, err := tx.SetNodeSpec(proto.NodeSpec{Node: fmt.Sprintf(format, i), Role: proto.RoleNode}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestATenantsSilentAgentsLeaveOthersPushes: tenant beta's 64 machines run agents that
// never acknowledge a NodeSpec (their root users hold the agents' keys), and beta
// changes every one of their NodeSpecs. Alone in the window, its pushes hold all of it but
// the eighth kept free for another tenant, and the rest are deferred, so a NodeSpec of
// acme's machine stored after them reaches acme's agent while beta's pushes still hold
// their places. Before, beta's 64 pushes held the
// whole window until the ack timeout (here an hour), and the push workers, waiting for
// a place, held acme's push behind them.
func TestATenantsSilentAgentsLeaveOthersPushes(t *testing.T) {
	const silent = 64 // the window's first size
	e := newEnv(t, agents.Config{AckTimeout: time.Hour})
	storetest.Update(t, e.st, func(tx *store.Tx) error {
		if _, err := tx.CreateSite("rack-a"); err != nil {
			return err
		}
		for _, tn := range []string{"acme", "beta"} {
			if _, err := tx.CreateTenant(tn); err != nil {
				return err
			}
			if _, err := tx.CreatePool(store.Pool{Tenant: tn, Name: "gpu", Site: "rack-a"}); err != nil {
				return err
			}
		}
		return nil
	})
	var g gate
	g.init()
	defer g.release()
	beta := make([]string, silent)
	for i := range beta {
		beta[i] = storetest.Node(t, e.st, store.Node{Tenant: "beta", Pool: "gpu", MACs: []string{fmt.Sprintf("52:54:00:00:0b:%02x", i)}}).ID
		e.startAgent(beta[i], func(c *session.Config) { c.KeepAlive, c.Apply = 5*time.Second, holdApply(&g) })
	}
	acme := storetest.Node(t, e.st, store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:0a:01"}}).ID
	e.startAgent(acme, func(c *session.Config) { c.KeepAlive = 5 * time.Second })
	waitFor(t, "every agent connected", func() bool { return e.ep.Sessions() == silent+1 })

	storetest.Update(t, e.st, func(tx *store.Tx) error {
		for _, node := range beta {
			if _, err := tx.SetNodeSpec(proto.NodeSpec{Node: node, Role: proto.RoleNode}); err != nil {
				return err
			}
		}
		return nil
	})
	waitFor(t, "beta's pushes made or deferred", func() bool {
		w := e.ep.PushWindow()
		return w.InFlight+w.Deferred == silent && g.inside() == w.InFlight
	})
	e.setSpec(acme, nil)
	waitFor(t, "acme's NodeSpec applied", func() bool { return e.status(acme).ObservedGeneration == 1 })
	if w := e.ep.PushWindow(); w.Late != 0 || w.InFlight < w.Size/2 || g.inside() != w.InFlight {
		t.Fatalf("window %+v, %d of beta's agents applying: want beta's pushes still holding their places", w, g.inside())
	}
}

// heldPushes is an endpoint whose pushes wait an hour for their acknowledgement, and a
// gate for its agents' apply to hold their NodeSpecs at (released as the test ends).
func heldPushes(t *testing.T) (*env, *gate) {
	e := newEnv(t, agents.Config{AckTimeout: time.Hour})
	g := &gate{}
	g.init()
	t.Cleanup(g.release)
	return e, g
}

// deferChange stores a NodeSpec for the n nodes named by format, whose agents (of one
// tenant) hold their apply at g, and waits for the pushes beyond the tenant's share to
// be deferred and the others held; it returns the window then.
func deferChange(t *testing.T, e *env, g *gate, n int, format string) (w agents.PushWindow) {
	t.Helper()
	setSpecs(t, e.st, n, format)
	waitFor(t, "the tenant's pushes made or deferred", func() bool {
		w = e.ep.PushWindow()
		return w.Deferred > 0 && w.InFlight+w.Deferred == n && g.inside() == w.InFlight
	})
	return w
}

// TestDeferredPushTakesTheFreedPlace: 64 agents of one tenant hold their NodeSpecs in
// apply, so a change for all finds the tenant at its share (all the window but an
// eighth) and 8 nodes are deferred. While deferred, one node's NodeSpec moves to a newer
// generation and another's agent goes away. As the held pushes are acknowledged, the
// places they free go to the deferred nodes: each is sent its newest NodeSpec once (the
// moved one never the older generation), the place handed to the node whose session
// ended is given back, and the window comes back to zero.
func TestDeferredPushTakesTheFreedPlace(t *testing.T) {
	const n = 64 // the window's first size
	e, g := heldPushes(t)
	var mu sync.Mutex
	got := map[string][]int64{} // the generations each node's agent was sent
	stops := map[string]func(){}
	for i := range n {
		node := fmt.Sprintf("held-%02d", i)
		_, stops[node] = e.runAgent(node, func(c *session.Config) {
			c.KeepAlive = 5 * time.Second
			c.Apply = func(ctx context.Context, spec proto.NodeSpec) error {
				mu.Lock()
				got[spec.Node] = append(got[spec.Node], spec.Generation)
				mu.Unlock()
				return holdApply(g)(ctx, spec)
			}
		})
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	waitFor(t, "every agent connected", func() bool { return e.ep.Sessions() == n })
	w := deferChange(t, e, g, n, "held-%02d")
	deferred := w.Deferred
	var waiting []string // the deferred nodes: their agents were sent nothing
	mu.Lock()
	for i := range n {
		if node := fmt.Sprintf("held-%02d", i); len(got[node]) == 0 {
			waiting = append(waiting, node)
		}
	}
	mu.Unlock()
	if len(waiting) != deferred || deferred < 2 {
		t.Fatalf("%d agents sent nothing, window %+v: want the %d deferred, two or more", len(waiting), w, deferred)
	}
	moved, gone := waiting[0], waiting[1]
	pushed := e.ep.Pushes().Pushed
	if gen := e.setSpec(moved, map[string]string{"round": "2"}); gen != 2 {
		t.Fatalf("moved %s to generation %d, want 2", moved, gen)
	}
	stops[gone]()
	delete(stops, gone)
	waitFor(t, gone+"'s session ended", func() bool { return e.ep.Sessions() == n-1 })
	if w := e.ep.PushWindow(); w.Deferred != deferred || e.ep.Pushes().Pushed != pushed {
		t.Fatalf("window %+v, %d more pushes: want the nodes still deferred and nothing sent while the share is held", w, e.ep.Pushes().Pushed-pushed)
	}

	g.release() // the held pushes are acknowledged: their places go to the deferred nodes
	waitFor(t, "the deferred nodes sent their NodeSpecs", func() bool {
		w := e.ep.PushWindow()
		return w.Deferred == 0 && w.InFlight == deferred-1 && g.inside() == deferred-1
	})
	mu.Lock()
	for _, node := range waiting[1:] {
		if node != gone && !slices.Equal(got[node], []int64{1}) {
			t.Errorf("%s was sent generations %v, want [1]", node, got[node])
		}
	}
	if !slices.Equal(got[moved], []int64{2}) {
		t.Errorf("%s, whose NodeSpec moved while deferred, was sent generations %v, want only the newest, [2]", moved, got[moved])
	}
	if len(got[gone]) != 0 {
		t.Errorf("%s, whose session ended while deferred, was sent generations %v", gone, got[gone])
	}
	mu.Unlock()
	if p := e.ep.Pushes().Pushed; p != pushed+int64(deferred-1) {
		t.Errorf("%d pushes for %d deferred nodes of which one went away, want one each", p-pushed, deferred)
	}
	g.release()
	waitWindowEmpty(t, e.ep)
	if w := e.ep.PushWindow(); w.Deferred != 0 {
		t.Fatalf("window %+v: want nothing deferred", w)
	}
}

// TestRegistryStopsWithPushesDeferred: the registry stops while 64 agents of one tenant
// hold a change for all in apply and the pushes beyond the tenant's share are deferred:
// every place, those handed to deferred nodes as the sessions end too, is given back.
func TestRegistryStopsWithPushesDeferred(t *testing.T) {
	const n = 64 // the window's first size
	e, g := heldPushes(t)
	for i := range n {
		e.startAgent(fmt.Sprintf("held-%02d", i), func(c *session.Config) { c.KeepAlive, c.Apply = 5*time.Second, holdApply(g) })
	}
	waitFor(t, "every agent connected", func() bool { return e.ep.Sessions() == n })
	deferChange(t, e, g, n, "held-%02d")
	ep := e.ep
	e.stop()
	if w := ep.PushWindow(); w.InFlight != 0 || w.Deferred != 0 || w.Waiting != 0 {
		t.Fatalf("window %+v once the registry stopped: want nothing in flight, deferred or waiting", w)
	}
}

// dialUnread connects to the registry as node with a client of its own making, as the
// root user of a machine runs with its agent's key: its receive windows are as small as
// QUIC lets a peer ask, it says hello, and it never reads what the registry sends.
func dialUnread(t *testing.T, e *env, node string) {
	t.Helper()
	cert, err := e.ca.AgentCertificate(node, string(proto.RoleNode))
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: e.ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{proto.AgentALPN}}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, e.addr, conf, &quic.Config{MaxIdleTimeout: time.Minute, KeepAlivePeriod: time.Second,
		InitialStreamReceiveWindow: 64, MaxStreamReceiveWindow: 64, InitialConnectionReceiveWindow: 64, MaxConnectionReceiveWindow: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	stream, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.WriteMessage(stream, &proto.Message{Type: proto.MsgHello, Hello: &proto.Hello{}}); err != nil {
		t.Fatal(err)
	}
}

// TestAnAgentThatNeverReadsStallsNoPush: the agents of two machines, run by their root
// users with clients of their own, never read their session streams. Their NodeSpecs
// change, one after the other, and then a third machine's: its agent is pushed its
// NodeSpec and applies it at once, while the writes to the two that never read wait for
// them. Before, each push worker wrote a NodeSpec itself and waited for the agent to
// read it, up to the write timeout (10 s): two such agents held both workers, and every
// other machine's NodeSpec waited behind them.
func TestAnAgentThatNeverReadsStallsNoPush(t *testing.T) {
	e := newEnv(t, agents.Config{})
	unread := []string{"unread-1", "unread-2"}
	for _, node := range unread {
		dialUnread(t, e, node)
	}
	e.startAgent("acme-1", func(c *session.Config) { c.KeepAlive = 5 * time.Second })
	waitFor(t, "every agent connected", func() bool { return e.ep.Sessions() == len(unread)+1 })
	for i, node := range unread {
		labels := map[string]string{}
		for j := range 64 { // a NodeSpec larger than QUIC buffers without the agent's window
			labels[fmt.Sprintf("label-%02d", j)] = fmt.Sprintf("value-%d-%02d", i, j)
		}
		e.setSpec(node, labels)
		time.Sleep(100 * time.Millisecond) // a push worker takes it
	}
	start := time.Now()
	e.setSpec("acme-1", nil)
	waitUntil(t, "acme-1's NodeSpec applied", 3*time.Second, 5*time.Millisecond, func() bool { return e.status("acme-1").ObservedGeneration == 1 })
	t.Logf("acme-1 applied its NodeSpec %v after it changed", time.Since(start))
}
