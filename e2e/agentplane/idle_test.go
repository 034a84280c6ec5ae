package agentplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
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
	conn, stream := sessionOverQUIC(t, e, "gpu-1", proto.Hello{})
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
// registry endpoint in this process. Each agent starts at a random moment within a
// keep-alive period, as a fleet's machines would, so that the pings spread over the
// period (bunched timers cost the runtime less). Once every agent is connected and a
// period has passed (the connect's own work is done), it measures the registry's and the
// agents' CPU over a window of BC_IDLE_PERIODS keep-alive periods (as many as make at
// least a minute, and at least two): a whole number of periods, so that every agent
// pings the same number of times in it whenever it connected. More than 1% of the
// sessions (or of the peer's connections) lost or dialled again in the window fail the
// benchmark; fewer are reported.
//
// The peer, measured over the same window (so under the same load from the rest of the
// machine): as many bare quic-go connections (BC_LOAD_PEERS to change it) from one child
// process to a bare listener in another, kept alive by quic-go's own keep-alive at the
// same period, with the same idle timeout and dialled as spread: what quic-go alone
// costs to keep the connections alive. Both are idle, so each takes little of the processor from the other.
//
// With BC_LOAD_PROFILE=DIR, the registry's CPU profile of the window is written to
// DIR/idle.pprof and the first agent process's to DIR/agents-idle.pprof, each with its
// process's allocations at the window's start and end (profileCPUs).
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

	enterPhase(b, fmt.Sprintf("the peer, %d quic-go connections", peers))
	peer := startKeepAlivePeer(b, e.dir, peers, keepAlive)
	enterPhase(b, fmt.Sprintf("connect, %d agents in processes of %d", n, per))
	connect := startPhase(nil)
	var children []*child
	for first := 0; first < n; first += per {
		children = append(children, startChild(b, "agents", "BC_DIR="+e.dir, "BC_ADDR="+e.addr, "BC_FIRST="+strconv.Itoa(first), "BC_COUNT="+strconv.Itoa(min(per, n-first)),
			"BC_LOAD_SPREAD="+keepAlive.String(), "BC_KEEPALIVE="+keepAlive.String()))
	}
	connect.children = children // their CPU from their start, making their keys included
	waitLong(b, "every agent connected", func() bool { return e.ep.Sessions() == n })
	connect.end()
	enterPhase(b, "a keep-alive period after the connect")
	sleepWatching(b, "a keep-alive period to pass", keepAlive)

	handshakes, dialled := e.ep.Handshakes().Accepted, peer.accepted()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	stopProfile := profileCPU(b, "idle.pprof", children[0])
	enterPhase(b, "the idle window")
	idle := startPhase(children)
	listener, dialler := processesCPU(peer.listener), processesCPU(peer.dialler)
	sleepWatching(b, "the idle window to pass", window)
	idle.end()
	listener, dialler = processesCPU(peer.listener)-listener, processesCPU(peer.dialler)-dialler
	stopProfile()
	runtime.ReadMemStats(&after)
	// A connection lost in the window costs a handshake, a millisecond or two: a few are
	// noise in a minute's CPU, and are reported; more than 1% mean the window was not idle.
	reconnected := int(e.ep.Handshakes().Accepted-handshakes) + n - e.ep.Sessions()
	redialled := peer.accepted() - dialled + peers - peer.live()
	if reconnected > n/100 || redialled > peers/100 {
		b.Fatalf("the connections did not stay idle: %d agents reconnected or gone, %d peer connections", reconnected, redialled)
	}

	perSecond := func(d time.Duration) float64 { return d.Seconds() / window.Seconds() }
	perPing := func(d time.Duration, conns int) float64 { return d.Seconds() * 1e6 / float64(conns*periods) } // one a period each
	fmt.Printf("idle fleet: %d sessions, agents in %d processes, a ping every %v, window %v (%d periods); peer: %d quic-go connections, its keep-alive every %v\n",
		n, len(children), keepAlive, window, periods, peers, keepAlive)
	connect.print("connect", n, "until every agent said hello, spread over a period")
	fmt.Printf("  idle     registry CPU %.4f s a second (%.1f us a ping), agents' %.4f s a second (%.1f us a ping); %d garbage collections in the registry\n",
		perSecond(idle.cpu), perPing(idle.cpu, n), perSecond(idle.agents), perPing(idle.agents, n), after.NumGC-before.NumGC)
	paths := e.ep.Paths()
	fmt.Printf("  paths    the sessions' probe timeouts median %v, 99th percentile %v, longest %v; %s since the connect\n",
		paths.ProbeTimeoutMedian.Round(time.Millisecond), paths.ProbeTimeoutP99.Round(time.Millisecond), paths.ProbeTimeoutMax.Round(time.Millisecond), remeasured(paths))
	fmt.Printf("  peer     listener CPU %.4f s a second (%.1f us a keep-alive), dialler's %.4f s a second (%.1f us a keep-alive), same window\n",
		perSecond(listener), perPing(listener, peers), perSecond(dialler), perPing(dialler, peers))
	ratio := perPing(idle.cpu, n) / perPing(listener, peers)
	fmt.Printf("  idle/peer: registry CPU a ping / listener CPU a keep-alive %.2f, both ends %.2f; in the window %d agents and %d peer connections reconnected or were gone\n",
		ratio, perPing(idle.cpu+idle.agents, n)/perPing(listener+dialler, peers), reconnected, redialled)
	b.ReportMetric(keepAlive.Seconds(), "keepalive-s")
	b.ReportMetric(perSecond(idle.cpu), "registry-CPU-s/s")
	b.ReportMetric(perPing(idle.cpu, n), "registry-CPU-us/ping")
	b.ReportMetric(perSecond(idle.agents), "agents-CPU-s/s")
	b.ReportMetric(perPing(idle.agents, n), "agents-CPU-us/ping")
	b.ReportMetric(perSecond(listener), "peer-listener-CPU-s/s")
	b.ReportMetric(ratio, "idle-CPU/peer")
}

// keepAlivePeer is the idle fleet's peer: a bare quic-go listener in one child process
// and, in another, connections to it that quic-go keeps alive.
type keepAlivePeer struct {
	listener, dialler []*child
}

// startKeepAlivePeer starts the keep-alive peer with count connections kept alive every
// keepAlive, and waits until all are connected.
func startKeepAlivePeer(b *testing.B, dir string, count int, keepAlive time.Duration) *keepAlivePeer {
	ka := "BC_PEER_KEEPALIVE=" + keepAlive.String()
	ln := startChild(b, "listener", "BC_DIR="+dir, ka)
	p := &keepAlivePeer{listener: []*child{ln}}
	p.dialler = []*child{startChild(b, "bare", "BC_ADDR="+ln.ask("addr"), "BC_COUNT="+strconv.Itoa(count), ka, "BC_LOAD_SPREAD="+keepAlive.String())}
	waitLong(b, "the peer's connections", func() bool { return p.live() == count })
	return p
}

// live is how many of the peer's connections are open; accepted how many the listener
// accepted in all.
func (p *keepAlivePeer) live() int     { return p.count(0) }
func (p *keepAlivePeer) accepted() int { return p.count(1) }

func (p *keepAlivePeer) count(field int) int {
	f := strings.Fields(p.listener[0].ask("count"))
	if len(f) != 2 {
		p.listener[0].t.Fatalf("the peer's listener answered %q", f)
	}
	n, _ := strconv.Atoi(f[field])
	return n
}

// peerKeepAlive is the keep-alive peer's dialling configuration: quic-go's own
// keep-alive every keepAlive, and an idle timeout of four periods as an agent's.
func peerKeepAlive(keepAlive time.Duration) *quic.Config {
	return &quic.Config{KeepAlivePeriod: keepAlive, MaxIdleTimeout: 4 * keepAlive, DisablePathMTUDiscovery: true}
}

// runListenerChild is the keep-alive peer's listener: a bare quic-go listener on loopback
// with the test server certificate of the CA in BC_DIR and an idle timeout of four
// BC_PEER_KEEPALIVE periods, accepting connections until stdin closes. It answers "addr"
// with its address and "count" with the connections open and those accepted in all.
func runListenerChild() int {
	_, cert, err := readServer(os.Getenv("BC_DIR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	keepAlive := envDuration("BC_PEER_KEEPALIVE", session.DefaultKeepAlive)
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"bare"}},
		&quic.Config{MaxIdleTimeout: 4 * keepAlive, DisablePathMTUDiscovery: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ln.Close()
	var accepted atomic.Int64
	live := acceptCounted(ln, acceptors, func(*quic.Conn) { accepted.Add(1) })
	fmt.Println("ready")
	requests(func(req []string) string {
		switch {
		case len(req) == 1 && req[0] == "addr":
			return ln.Addr().String()
		case len(req) == 1 && req[0] == "count":
			return fmt.Sprintf("%d %d", live.Load(), accepted.Load())
		}
		return ""
	})
	return 0
}
