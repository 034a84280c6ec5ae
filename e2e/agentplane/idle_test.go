package agentplane

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/quic-go/quic-go"
)

// TestPingFrames: the endpoint takes the agent's pings as they come, the frame of
// proto.PingFrame whole or in pieces and a ping written otherwise, and the messages
// between them; a frame as long as a ping that is not one is decoded as what it is (here
// a message of no known type, which ends the session as a protocol error).
func TestPingFrames(t *testing.T) {
	var inv inventoryLog
	e := newEnv(t, agents.Config{OnInventory: inv.add})
	conn, stream := sessionOverQUIC(t, e, "gpu-1")
	write := func(frame string) {
		t.Helper()
		if _, err := stream.Write([]byte(frame)); err != nil {
			t.Fatal(err)
		}
	}
	inventory := func(data string) {
		t.Helper()
		if err := proto.WriteMessage(stream, &proto.Message{Type: proto.MsgInventory, Inventory: &proto.Inventory{Section: "system", Data: raw(data)}}); err != nil {
			t.Fatal(err)
		}
	}
	write(proto.PingFrame)
	inventory(`{"cpus":1}`)
	write(proto.PingFrame + proto.PingFrame)
	write(proto.PingFrame[:2])
	time.Sleep(50 * time.Millisecond)
	write(proto.PingFrame[2:9])
	time.Sleep(50 * time.Millisecond)
	write(proto.PingFrame[9:])
	write("\x00\x00\x00\x11" + `{"type": "ping" }`)
	inventory(`{"cpus":2}`)
	waitFor(t, "both inventories", func() bool { return len(inv.get()) == 2 })
	if want := []string{`gpu-1 system {"cpus":1}`, `gpu-1 system {"cpus":2}`}; !slices.Equal(inv.get(), want) {
		t.Fatalf("inventories %q, want %q", inv.get(), want)
	}
	if !e.ep.Connected("gpu-1", proto.RoleNode) {
		t.Fatal("the session ended on pings")
	}
	write("\x00\x00\x00\x0f" + `{"type":"pong"}`)
	select {
	case <-conn.Context().Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the session outlived a frame of no known type")
	}
	if ae, ok := errors.AsType[*quic.ApplicationError](context.Cause(conn.Context())); !ok || proto.CloseCode(ae.ErrorCode) != proto.CloseProtocol {
		t.Fatalf("after a pong: closed with %v, want CloseProtocol", context.Cause(conn.Context()))
	}
}

// TestSilentSessionEnds: the endpoint ends the session of an agent that sends nothing for
// its IdleTimeout, as it would a dead machine's, and keeps the session of an agent whose
// pings come within it.
func TestSilentSessionEnds(t *testing.T) {
	var mu sync.Mutex
	ended := map[string]int{}
	e := newEnv(t, agents.Config{IdleTimeout: time.Second, OnSessionEnd: func(node string, _ proto.Role, _, _ time.Time) {
		mu.Lock()
		defer mu.Unlock()
		ended[node]++
	}})
	endings := func(node string) int {
		mu.Lock()
		defer mu.Unlock()
		return ended[node]
	}
	e.startAgent("pinging", func(c *session.Config) { c.KeepAlive = 200 * time.Millisecond })
	e.startAgent("silent", func(c *session.Config) { c.KeepAlive = time.Hour })
	waitFor(t, "both sessions", func() bool {
		return e.ep.Connected("pinging", proto.RoleNode) && e.ep.Connected("silent", proto.RoleNode)
	})
	waitFor(t, "the silent agent's session to end", func() bool { return endings("silent") == 1 && !e.ep.Connected("silent", proto.RoleNode) })
	time.Sleep(2 * time.Second) // two more idle timeouts
	if n := endings("pinging"); n != 0 || !e.ep.Connected("pinging", proto.RoleNode) {
		t.Fatalf("the pinging agent's session ended %d times and is connected: %t", n, e.ep.Connected("pinging", proto.RoleNode))
	}
}

// BenchmarkIdleFleet measures what a fleet that does nothing costs: BC_LOAD_AGENTS agent
// sessions (10,000 by default) in child processes of BC_LOAD_PER_PROCESS (5,000), each
// agent sending its ping every BC_LOAD_KEEPALIVE (session.DefaultKeepAlive), held by one
// registry endpoint in this process. Once every agent is connected and a keep-alive
// period has passed (the connect's own work is done), it measures the registry's and the
// agents' CPU over a window of BC_IDLE_PERIODS keep-alive periods (as many as make at
// least a minute, and at least two): a whole number of periods, so that every agent
// pings the same number of times in it whenever it connected. The window fails the
// benchmark if a session ended or a handshake happened in it.
//
// The peer, measured first in the same run: as many bare quic-go connections
// (BC_LOAD_PEERS to change it) from one child process to a bare listener in this
// process, kept alive by quic-go's own keep-alive at the same period, with the same idle
// timeout, over a window as long: what quic-go alone costs to keep the connections
// alive.
//
// With BC_LOAD_PROFILE=DIR, the registry's CPU profile of the window is written to
// DIR/idle.pprof, the first agent process's to DIR/agents-idle.pprof and the peer
// listener's to DIR/peer-idle.pprof.
func BenchmarkIdleFleet(b *testing.B) {
	n, per := envInt("BC_LOAD_AGENTS", 10000), envInt("BC_LOAD_PER_PROCESS", 5000)
	peers := envInt("BC_LOAD_PEERS", n)
	keepAlive := envDuration("BC_LOAD_KEEPALIVE", session.DefaultKeepAlive)
	periods := envInt("BC_IDLE_PERIODS", max(2, int((time.Minute+keepAlive-1)/keepAlive)))
	window := time.Duration(periods) * keepAlive
	// An agent's own idle timeout is four keep-alive periods; the endpoint's must not be
	// shorter for the longer periods compared.
	e := newEnv(b, agents.Config{IdleTimeout: max(agents.DefaultIdleTimeout, 4*keepAlive)})
	writeCA(b, e.ca, e.dir)

	peer := keepAlivePeer(b, e.dir, peers, keepAlive, window)

	connect := startPhase(nil)
	var children []*child
	for first := 0; first < n; first += per {
		children = append(children, startChild(b, "agents", "BC_DIR="+e.dir, "BC_ADDR="+e.addr, "BC_FIRST="+strconv.Itoa(first), "BC_COUNT="+strconv.Itoa(min(per, n-first))))
	}
	connect.children = children // their CPU from their start, making their keys included
	waitLong(b, "every agent connected", func() bool { return e.ep.Sessions() == n })
	connect.end()
	time.Sleep(keepAlive)
	handshakes := e.ep.Handshakes().Accepted
	idle := measureIdle(b, "idle.pprof", children[0], children, window)
	if got := e.ep.Sessions(); got != n {
		b.Fatalf("%d of %d sessions left at the end of the idle window", got, n)
	}
	if got := e.ep.Handshakes().Accepted - handshakes; got != 0 {
		b.Fatalf("%d handshakes in the idle window: agents reconnected", got)
	}
	for _, c := range children {
		c.stop()
	}

	perSecond := func(d time.Duration) float64 { return d.Seconds() / window.Seconds() }
	perPing := func(d time.Duration, conns int) float64 { return d.Seconds() * 1e6 / float64(conns*periods) } // one a period each
	fmt.Printf("idle fleet: %d sessions, agents in %d processes, a ping every %v, window %v (%d periods); peer: %d quic-go connections, its keep-alive every %v\n",
		n, len(children), keepAlive, window, periods, peers, keepAlive)
	connect.print("connect", n, "until every agent said hello")
	fmt.Printf("  idle     registry CPU %.4f s a second (%.1f us a ping), agents' %.4f s a second (%.1f us a ping); %d garbage collections in the window\n",
		perSecond(idle.cpu), perPing(idle.cpu, n), perSecond(idle.agents), perPing(idle.agents, n), idle.gcs)
	fmt.Printf("  peer     listener CPU %.4f s a second (%.1f us a keep-alive), dialler's %.4f s a second (%.1f us a keep-alive); %d garbage collections in the window\n",
		perSecond(peer.cpu), perPing(peer.cpu, peers), perSecond(peer.agents), perPing(peer.agents, peers), peer.gcs)
	ratio := perPing(idle.cpu, n) / perPing(peer.cpu, peers)
	fmt.Printf("  idle/peer: registry CPU a ping / listener CPU a keep-alive %.2f, both ends %.2f\n",
		ratio, perPing(idle.cpu+idle.agents, n)/perPing(peer.cpu+peer.agents, peers))
	b.ReportMetric(keepAlive.Seconds(), "keepalive-s")
	b.ReportMetric(perSecond(idle.cpu), "registry-CPU-s/s")
	b.ReportMetric(perPing(idle.cpu, n), "registry-CPU-us/ping")
	b.ReportMetric(perSecond(idle.agents), "agents-CPU-s/s")
	b.ReportMetric(perPing(idle.agents, n), "agents-CPU-us/ping")
	b.ReportMetric(perSecond(peer.cpu), "peer-listener-CPU-s/s")
	b.ReportMetric(ratio, "idle-CPU/peer")
}

// idlePhase is a measured idle window and the garbage collections of this process in it.
type idlePhase struct {
	*phase
	gcs uint32
}

// measureIdle measures this process's and the children's CPU over window, profiling it
// as profileCPU does (with the agents of profiled, when not nil).
func measureIdle(b *testing.B, profile string, profiled *child, children []*child, window time.Duration) *idlePhase {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	stopProfile := profileCPU(b, profile, profiled)
	p := startPhase(children)
	time.Sleep(window)
	p.end()
	stopProfile()
	runtime.ReadMemStats(&after)
	return &idlePhase{phase: p, gcs: after.NumGC - before.NumGC}
}

// peerKeepAlive is the keep-alive peer's dialling configuration: quic-go's own
// keep-alive every keepAlive, and an idle timeout of four periods as an agent's.
func peerKeepAlive(keepAlive time.Duration) *quic.Config {
	return &quic.Config{KeepAlivePeriod: keepAlive, MaxIdleTimeout: 4 * keepAlive, DisablePathMTUDiscovery: true}
}

// keepAlivePeer holds count bare quic-go connections from one child process, kept alive
// by quic-go's keep-alive every keepAlive, and measures a window of them idle once a
// period has passed since the last connected.
func keepAlivePeer(b *testing.B, dir string, count int, keepAlive, window time.Duration) *idlePhase {
	ln, err := quic.ListenAddr("127.0.0.1:0", bareTLS(b, dir), &quic.Config{MaxIdleTimeout: 4 * keepAlive, DisablePathMTUDiscovery: true})
	if err != nil {
		b.Fatal(err)
	}
	var accepted atomic.Int64
	live := acceptCounted(ln, acceptors, func(*quic.Conn) { accepted.Add(1) })
	c := startChild(b, "bare", "BC_DIR="+dir, "BC_ADDR="+ln.Addr().String(), "BC_COUNT="+strconv.Itoa(count), "BC_PEER_KEEPALIVE="+keepAlive.String())
	waitLong(b, "the peer's connections", func() bool { return live.Load() == int64(count) })
	time.Sleep(keepAlive)
	dialled := accepted.Load()
	p := measureIdle(b, "peer-idle.pprof", nil, []*child{c}, window)
	p.ends = [2]string{"listener", "dialler's"}
	if got := live.Load(); got != int64(count) || accepted.Load() != dialled {
		b.Fatalf("the peer's connections did not stay idle: %d of %d open, %d dialled again", got, count, accepted.Load()-dialled)
	}
	c.stop()
	ln.Close()
	waitLong(b, "the peer's connections to close", func() bool { return live.Load() == 0 })
	return p
}
