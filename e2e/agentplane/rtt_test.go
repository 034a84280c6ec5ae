package agentplane

import (
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
)

// staleBound is the probe timeout above which the endpoint takes a loopback session's
// RTT estimate for stale (its floor: ten times a loopback sample is far under it).
const staleBound = time.Second

// TestAStaleRTTEstimateIsRemeasured: an agent whose answers to the registry's handshake
// reach it 3 s late, as on a registry whose processor a fleet's connect starves, leaves
// the registry's end of the session a probe timeout of about 9 s on a path that answers
// in well under a millisecond; the agent's pings, which only the agent's end samples,
// would leave it so for the life of the session (without the probes: 9.0 s before the
// pings and after 20 s of them). The endpoint probes the path of such a session at a
// ping until its estimate is under a second, and the agent, of this release and of the
// one before (which drop a secret answer to no request of theirs alike), keeps its
// session.
func TestAStaleRTTEstimateIsRemeasured(t *testing.T) {
	e := newEnv(t, agents.Config{})
	proxy := newLinkProxy(t, e.addr)
	proxy.holdAfter(1) // the agent's first datagram, its ClientHello, goes through; its answers wait
	// The agent's session starts at once at its end (the registry's flight reaches it):
	// its first ping comes a keep-alive period later, after the hold.
	e.startAgent("late-1", func(c *session.Config) { c.Addr, c.KeepAlive = proxy.Addr(), 5*time.Second })
	time.Sleep(3 * time.Second)
	proxy.release()
	waitFor(t, "the session", func() bool { return e.ep.Connected("late-1", proto.RoleNode) })
	// The registry's estimate before the agent's first ping reaches it: the agent's
	// datagrams wait meanwhile.
	proxy.holdAfter(0)
	before := e.ep.Paths()
	proxy.release()
	if before.Remeasured != 0 {
		t.Fatalf("a ping reached the registry before its estimate was read: %+v", before)
	}
	if before.ProbeTimeoutMax <= 2*staleBound {
		t.Fatalf("the registry's probe timeout is %v after a handshake answered 3 s late, want over %v: %+v", before.ProbeTimeoutMax, 2*staleBound, before)
	}
	after := e.ep.Paths()
	for end := time.Now().Add(20 * time.Second); after.ProbeTimeoutMax > staleBound; after = e.ep.Paths() {
		if time.Now().After(end) {
			t.Fatalf("the registry's probe timeout is %v after 20 s (4 pings; %v before them), want under %v: %+v", after.ProbeTimeoutMax, before.ProbeTimeoutMax, staleBound, after)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if after.Remeasured == 0 || after.Probes == 0 || after.Probes > 130 {
		t.Fatalf("probe timeout %v before, %v after %d probes in %d bursts: want one burst or more of at most 130", before.ProbeTimeoutMax, after.ProbeTimeoutMax, after.Probes, after.Remeasured)
	}
	if h := e.ep.Handshakes(); h.Accepted != 1 || !e.ep.Connected("late-1", proto.RoleNode) {
		t.Fatalf("the agent's session did not outlive the probes: %+v handshakes, connected %t", h, e.ep.Connected("late-1", proto.RoleNode))
	}
	t.Logf("probe timeout %v before (%d packets sent), %v after %d probes in %d bursts (%d packets sent)",
		before.ProbeTimeoutMax, before.PacketsSent, after.ProbeTimeoutMax, after.Probes, after.Remeasured, after.PacketsSent)
}

// TestAHealthySessionIsNotProbed: once a session's estimate is under the bound (at
// once over loopback, unless the machine starved the handshake), the registry sends its
// agent nothing but the acknowledgement of each ping, as before: over 30 pings, as many
// packets as the agent sent (a probe would take the acknowledgement of the ping with it
// and draw an acknowledgement of its own from the agent: half as many).
func TestAHealthySessionIsNotProbed(t *testing.T) {
	e := newEnv(t, agents.Config{})
	proxy := newLinkProxy(t, e.addr)
	e.startAgent("fast-1", func(c *session.Config) { c.Addr, c.KeepAlive = proxy.Addr(), 100*time.Millisecond })
	waitFor(t, "the session, its estimate under the bound", func() bool {
		return e.ep.Connected("fast-1", proto.RoleNode) && e.ep.Paths().ProbeTimeoutMax <= staleBound
	})
	time.Sleep(200 * time.Millisecond) // a burst of probes of an estimate the handshake left stale ends
	before, up := e.ep.Paths(), proxy.up.Load()
	waitFor(t, "30 pings", func() bool { return proxy.up.Load()-up >= 30 })
	after, pings := e.ep.Paths(), proxy.up.Load()-up
	sent := int64(after.PacketsSent - before.PacketsSent)
	if after.Probes != before.Probes || sent < pings-2 || sent > pings+2 {
		t.Fatalf("over %d datagrams of the agent's, the registry sent %d packets and %d probes: want one packet a ping and no probe (paths %+v)",
			pings, sent, after.Probes-before.Probes, after)
	}
	t.Logf("over %d datagrams of the agent's, the registry sent %d packets", pings, sent)
}
