package agentplane

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/quic-go/quic-go"
)

// TestRegistryRestart stops the registry (endpoint and store), changes the NodeSpec
// while it is down, and starts it again on the same store and address: the agent
// reconnects, converges to the new generation, and a command that was pending across
// the restart is answered without running twice.
func TestRegistryRestart(t *testing.T) {
	e := newEnv(t, agents.Config{})
	var count runs
	release := make(chan struct{})
	a := e.startAgent("gpu-1", func(c *session.Config) {
		c.Handlers = map[string]session.Handler{
			"slow": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				count.add("slow")
				<-release
				return raw(`"done"`), nil
			},
		}
	})
	e.setSpec("gpu-1", map[string]string{"v": "1"})
	waitFor(t, "generation 1", func() bool { return e.status("gpu-1").ObservedGeneration == 1 })

	// A relay under way when the registry stops: its caller learns the endpoint closed.
	relayed := make(chan error, 1)
	go func() {
		_, err := e.ep.Relay(context.Background(), "gpu-1", proto.RoleNode, proto.Command{ID: "across", Kind: "slow"})
		relayed <- err
	}()
	waitFor(t, "the command to run", func() bool { return count.get("slow") == 1 })
	e.stop()
	if err := <-relayed; proto.CodeOf(err) != proto.InvalidState {
		t.Fatalf("relay across the stop: got %v, want INVALID_STATE", err)
	}

	e.start()
	gen := e.setSpec("gpu-1", map[string]string{"v": "2"})
	waitFor(t, "the agent to converge", func() bool {
		return e.status("gpu-1").ObservedGeneration == gen && a.ObservedGeneration() == gen
	})
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.ep.Relay(ctx, "gpu-1", proto.RoleNode, proto.Command{ID: "across", Kind: "slow"})
	if err != nil || string(res) != `"done"` {
		t.Fatalf("relay after the restart: got %s, %v", res, err)
	}
	if n := count.get("slow"); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}

// TestNewerSessionReplacesOlder connects a second agent with the same node id: the
// registry keeps only the newer session, and the replaced agent keeps away for its
// longest backoff instead of taking the session back at once.
func TestNewerSessionReplacesOlder(t *testing.T) {
	e := newEnv(t, agents.Config{})
	e.setSpec("gpu-1", map[string]string{"v": "1"})
	first := e.startAgent("gpu-1", func(c *session.Config) {
		c.Backoff = session.Backoff{Min: 10 * time.Millisecond, Max: time.Minute}
	})
	waitFor(t, "first agent", func() bool { return first.ObservedGeneration() == 1 })
	second := e.startAgent("gpu-1", nil)
	waitFor(t, "second agent", func() bool { return second.ObservedGeneration() == 1 })
	gen := e.setSpec("gpu-1", map[string]string{"v": "2"})
	waitFor(t, "second agent at generation 2", func() bool { return second.ObservedGeneration() == gen })
	time.Sleep(200 * time.Millisecond)
	if n, got := e.ep.Sessions(), first.ObservedGeneration(); n != 1 || got != 1 {
		t.Fatalf("%d sessions; the replaced agent is at generation %d, want 1", n, got)
	}
}

// TestStopSpacesTheReturns connects agents over bare QUIC, stops the registry, and reads
// the CloseShutdown each one gets: every agent is given its own moment to come back, a
// reconnect slot (1/rate) apart, so that a fleet told at once does not return at once.
//
// Each phrase names the agent's moment and the stream's end, both from the instant the
// registry told it, so the moment relative to the stream's end is the one the registry
// planned, however long the close frame took to arrive. An agent told after its slot has
// passed is asked back at once: its moment is when it was told (returnDelay).
func TestStopSpacesTheReturns(t *testing.T) {
	e := newEnv(t, agents.Config{})
	const n = 20
	conns := sessionsOverQUIC(t, e, n)
	// One more agent is connected but has not said hello: the endpoint knows no session
	// of it when it stops.
	late := dialQUIC(t, e, "late")
	waitFor(t, "the late agent's handshake", func() bool { return e.ep.Handshakes().Accepted == n+1 })
	rate := e.ep.Return().Rate
	e.stop()
	// slot is the k-th agent's moment, from the stream's end.
	slot := func(k int) time.Duration {
		at := func(k int) time.Duration { return time.Duration(float64(k) / rate * float64(time.Second)) }
		return at(k) - at(n)
	}
	var moments, toldAt []time.Duration
	for _, c := range conns {
		p := shutdownPhrase(t, c)
		if p.delay > p.streamEnd {
			t.Errorf("an agent is to return %v after the stream's end", p.delay-p.streamEnd)
		}
		moments = append(moments, p.delay-p.streamEnd)
		toldAt = append(toldAt, -p.streamEnd)
	}
	slices.Sort(moments)
	slices.Sort(toldAt)
	// The phrase counts whole milliseconds, so a moment read from it is within 1 ms of the
	// planned one. The i-th agent to return comes no sooner than the i-th slot: the fleet
	// returns no faster than the stream; and no later than that slot or the moment it was
	// told: the returns are spread over the stream, not gathered at its end.
	for i, m := range moments {
		if lo, hi := slot(i)-time.Millisecond, max(slot(i), toldAt[i])+time.Millisecond; m <= lo || m >= hi {
			t.Errorf("return %d of %d is %v from the stream's end, want after %v and before %v (slots of 1/%.0f s)", i, n, m, lo, hi, rate)
		}
	}
	if t.Failed() {
		t.Logf("the returns, from the stream's end: %v\nwhen each was told: %v", moments, toldAt)
	}
	if p := shutdownPhrase(t, late); p.delay != p.streamEnd {
		t.Errorf("the agent without a session yet is to return %v before the stream's end, want at its end", p.streamEnd-p.delay)
	}
}

// toldPhrase is what a closed connection was told: the delay its CloseShutdown names
// and when it says the stream of returning agents ends, both from when it was told, and
// the spread within which an agent refused tries again after that end.
type toldPhrase struct{ delay, streamEnd, spread time.Duration }

// shutdownPhrase waits for conn's close and reads its CloseShutdown.
func shutdownPhrase(t *testing.T, conn *quic.Conn) toldPhrase {
	t.Helper()
	<-conn.Context().Done()
	cause := context.Cause(conn.Context())
	ae, ok := errors.AsType[*quic.ApplicationError](cause)
	if !ok || proto.CloseCode(ae.ErrorCode) != proto.CloseShutdown {
		t.Fatalf("closed with %v, want CloseShutdown", cause)
	}
	d, ok := proto.ShutdownDelay(ae.ErrorMessage)
	end, endOK := proto.ShutdownStreamEnd(ae.ErrorMessage)
	spread, spreadOK := proto.ShutdownReslotSpread(ae.ErrorMessage)
	if !ok || !endOK || !spreadOK {
		t.Fatalf("reason %q names no delay, no stream end or no re-slot spread", ae.ErrorMessage)
	}
	return toldPhrase{d, end, spread}
}

// sessionsOverQUIC opens sessions for n nodes over bare QUIC (helloOverQUIC) and waits
// until the endpoint holds every one.
func sessionsOverQUIC(t *testing.T, e *env, n int) []*quic.Conn {
	t.Helper()
	var conns []*quic.Conn
	for i := range n {
		conns = append(conns, helloOverQUIC(t, e, nodeName(i)))
	}
	waitFor(t, "every session", func() bool { return e.ep.Sessions() == n })
	return conns
}

// helloOverQUIC opens a session for node over bare QUIC (dialQUIC, then a hello on the
// session stream).
func helloOverQUIC(t *testing.T, e *env, node string) *quic.Conn {
	t.Helper()
	conn, _ := sessionOverQUIC(t, e, node, proto.Hello{})
	return conn
}

// sessionOverQUIC is helloOverQUIC with hello as the session's first message, returning
// the session stream too.
func sessionOverQUIC(t *testing.T, e *env, node string, hello proto.Hello) (*quic.Conn, *quic.Stream) {
	t.Helper()
	conn := dialQUIC(t, e, node)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.WriteMessage(stream, &proto.Message{Type: proto.MsgHello, Hello: &hello}); err != nil {
		t.Fatal(err)
	}
	return conn, stream
}

// dialQUIC connects to the registry as node over bare QUIC: a handshake with the node's
// agent certificate, no session yet.
func dialQUIC(t *testing.T, e *env, node string) *quic.Conn {
	t.Helper()
	cert, err := e.ca.AgentCertificate(node, string(proto.RoleNode))
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: e.ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{proto.AgentALPN}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, e.addr, conf, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn
}

// TestStopRecordsTheReturnFirst: a stopping endpoint hands OnStop the moment its last
// agent is asked back by (the stream's end: n/8000 + n/rate seconds after the close
// began), once, before it tells any agent, so that a registry that dies while telling
// them has recorded it; every agent's phrase names a stream's end no later than that.
// An endpoint that stops with no session calls it not.
func TestStopRecordsTheReturnFirst(t *testing.T) {
	const n = 20
	var conns []*quic.Conn
	var calls []time.Duration
	toldBefore := 0
	e := newEnv(t, agents.Config{OnStop: func(returnIn, _ time.Duration) {
		calls = append(calls, returnIn)
		for _, c := range conns {
			if c.Context().Err() != nil {
				toldBefore++
			}
		}
	}})
	conns = sessionsOverQUIC(t, e, n)
	rate := e.ep.Return().Rate
	e.stop()
	want := n*time.Second/8000 + time.Duration(float64(n)/rate*float64(time.Second))
	if len(calls) != 1 || calls[0] != want {
		t.Fatalf("OnStop was called with %v, want once with the stream's end %v", calls, want)
	}
	if toldBefore > 0 {
		t.Errorf("%d agents were told to come back before OnStop was called", toldBefore)
	}
	for _, c := range conns {
		if p := shutdownPhrase(t, c); p.streamEnd > want {
			t.Errorf("an agent was told the stream ends in %v, after the %v OnStop was given", p.streamEnd, want)
		}
	}

	calls = nil
	e.start()
	e.stop()
	if len(calls) != 0 {
		t.Errorf("an endpoint with no session called OnStop with %v", calls)
	}
}

// TestASlowStopRecordDelaysTheStream: a stopping endpoint whose stop record takes longer
// to store than the stream it plans lasts (OnStop 1.5 s against a stream of 1 s: 20
// agents at 20 a second), as with etcd out of reach until its request timeout, times the
// stream from the record's commit: its agents are still given their moments over the
// stream, and the last is told the stream ends about a second on. Before, the moments
// counted from the start of the close had all passed: every agent was asked back at once,
// a herd.
func TestASlowStopRecordDelaysTheStream(t *testing.T) {
	const n, rate = 20, 20
	e := newEnv(t, agents.Config{OnStop: func(time.Duration, time.Duration) { time.Sleep(1500 * time.Millisecond) }})
	e.stop()
	putPlan(t, e, store.AgentReturn{Rate: rate, Admission: 128})
	e.start()
	conns := sessionsOverQUIC(t, e, n)
	e.stop()
	var delays []time.Duration
	var end time.Duration
	for _, c := range conns {
		p := shutdownPhrase(t, c)
		delays, end = append(delays, p.delay), max(end, p.streamEnd)
	}
	slices.Sort(delays)
	// Telling 20 agents takes a few milliseconds of the first slots (50 ms each).
	if end < 800*time.Millisecond || delays[n/2] < 300*time.Millisecond {
		t.Errorf("told after a stop record of 1.5 s: the stream ends in %v at the latest, the agents return in %v; want about 1 s, spread over it", end, delays)
	}
}

// TestStopNamesTheReslotSpreadOfItsLastReturn: a stopping endpoint names, to OnStop and
// in every agent's phrase, the spread within which an agent refused on its return tries
// again after the stream's end, sized from the share of its last measured return it
// refused (proto.ReslotSpreadFor): a quarter of the stream when it measured none, 5% of
// it after a return that refused 1%, 6% after one that refused 4%, and 7.5% after one that
// refused 30%, whose stream the plan lowered to what the machine did (so the next is
// planned to refuse no more than 5%). The stream here is 100 s long (20 agents at 0.2 a
// second). Before, every stop named a quarter of the stream, and the last of a few agents
// refused came back that long after the rest.
func TestStopNamesTheReslotSpreadOfItsLastReturn(t *testing.T) {
	const n, rate = 20, 0.2
	var spreads []time.Duration
	var returnIn time.Duration
	e := newEnv(t, agents.Config{OnStop: func(in, spread time.Duration) { returnIn, spreads = in, append(spreads, spread) }})
	e.stop()
	for _, tc := range []struct {
		accepted, refused int64
		share             float64
	}{{0, 0, 0.25}, {1000, 10, 0.05}, {1000, 40, 0.06}, {1000, 300, 0.075}} {
		putPlan(t, e, store.AgentReturn{Rate: rate, Admission: 128, Accepted: tc.accepted, Refused: tc.refused})
		e.start()
		conns := sessionsOverQUIC(t, e, n)
		spreads = nil
		e.stop()
		want := time.Duration(tc.share * float64(returnIn))
		if len(spreads) != 1 || spreads[0] < want-time.Millisecond || spreads[0] > want+time.Millisecond {
			t.Errorf("after a return that refused %d of %d: OnStop was given the spreads %v, want one of %v (%.0f%% of the %v stream)",
				tc.refused, tc.accepted, spreads, want, tc.share*100, returnIn)
			continue
		}
		for _, c := range conns {
			if p := shutdownPhrase(t, c); p.spread != spreads[0].Truncate(time.Millisecond) {
				t.Errorf("after a return that refused %d of %d: an agent was told a spread of %v, OnStop %v", tc.refused, tc.accepted, p.spread, spreads[0])
			}
		}
	}
}

// TestStreamStartsAQuarterPastTheLastRestart: an endpoint started after a stop that told
// its agents measures its restart (from the stop's record to its listening), keeps it in
// its plan, and its next stop starts the stream a quarter past it where that is sooner
// than the time telling the fleet takes at 8,000 a second, the restart scaled up to a
// fleet larger than the one its stop told. Before, every stream started after the time
// telling takes, and a registry back sooner waited for its fleet (0.8 s of a 7.3 s return
// of 10,000 agents in the benchmark).
func TestStreamStartsAQuarterPastTheLastRestart(t *testing.T) {
	const n, rate = 20, 0.2
	var returnIn time.Duration
	e := newEnv(t, agents.Config{OnStop: func(in, _ time.Duration) { returnIn = in }})
	sessionsOverQUIC(t, e, n)
	e.stop()
	const pause = 200 * time.Millisecond
	time.Sleep(pause)
	e.start()
	if got := e.ep.Return(); got.Restart < pause || got.Restart > pause+5*time.Second || got.RestartTold != n {
		t.Errorf("restarted %v after a stop of %d agents: the plan says a restart of %v after a stop of %d", pause, n, got.Restart, got.RestartTold)
	}
	e.stop()

	stream := time.Duration(n / rate * float64(time.Second))
	telling := time.Duration(n) * time.Second / 8000
	for _, tc := range []struct {
		what        string
		restartTold int
		start       time.Duration
	}{
		{"a restart of 1 ms after a stop of as many agents", n, 1250 * time.Microsecond},
		{"a restart of 1 ms after a stop of a tenth of the agents", n / 10, telling},
	} {
		putPlan(t, e, store.AgentReturn{Rate: rate, Admission: 128, Restart: time.Millisecond, RestartTold: tc.restartTold})
		e.start()
		sessionsOverQUIC(t, e, n)
		e.stop()
		if want := tc.start + stream; returnIn != want {
			t.Errorf("%s: the stream ends %v after the close, want %v (starting %v after it)", tc.what, returnIn, want, tc.start)
		}
	}
}

// TestARestartIsMeasuredOnTheEndpointsClock: an endpoint whose clock (Config.Now) is 60
// days behind the real time, as a registry's is in the tests that let days pass, dates
// the stop of its agents by that clock and, started again, measures its restart from
// that date on the same clock: the pause between the two, of the agents the stop told.
// The stop's date and the start's reading must come from one clock: 60 days between
// them is no restart measured at all.
func TestARestartIsMeasuredOnTheEndpointsClock(t *testing.T) {
	const n = 5
	behind := func() time.Time { return time.Now().Add(-60 * 24 * time.Hour) }
	e := newEnv(t, agents.Config{Now: behind})
	sessionsOverQUIC(t, e, n)
	before := behind()
	e.stop()
	after := behind()
	if p := readPlan(t, e); p.StoppedAt.Before(before) || p.StoppedAt.After(after) || p.Told != n {
		t.Errorf("the stop of %d agents is dated %s and told %d, want between %s and %s by the endpoint's clock", n, p.StoppedAt, p.Told, before, after)
	}
	const pause = 200 * time.Millisecond
	time.Sleep(pause)
	e.start()
	if got := e.ep.Return(); got.Restart < pause || got.RestartTold != n {
		t.Errorf("restarted %v after a stop of %d agents: the plan says a restart of %v after a stop of %d", pause, n, got.Restart, got.RestartTold)
	}
}

// TestAShutdownOutlivesALostClose: a stopping registry tells an agent of this version on
// its session stream that it stops, before it closes the connection, so that an agent
// whose close is lost on the way still hears its moment and comes back at it. Once the
// session is quiet (the registry has sent nothing for a while: the end of its handshake
// and the answers to the hello delivered), the link loses the first datagram the
// registry sends, which the stop sends: the close itself, before, when the close was all
// the agent was told. The agent's keep-alive and backoff
// are an hour: it is back on the restarted registry only because it heard the moment
// the registry named, which it logs as its wait. Before, it heard nothing and would have
// learnt of the stop at its next ping, an hour on.
func TestAShutdownOutlivesALostClose(t *testing.T) {
	e := newEnv(t, agents.Config{})
	proxy := newLinkProxy(t, e.addr)
	logged := &records{}
	e.startAgent("gpu-1", func(c *session.Config) {
		c.Addr = proxy.Addr()
		c.Log = slog.New(logged)
		c.Backoff = session.Backoff{Min: time.Hour, Max: time.Hour}
		c.KeepAlive = time.Hour
	})
	waitFor(t, "the agent's session", func() bool { return e.ep.Sessions() == 1 })
	waitFor(t, "a quiet session", func() bool { return time.Since(proxy.downAt()) > 300*time.Millisecond })
	proxy.loseDown(1)
	e.stop()
	e.start()
	waitFor(t, "the agent back on the restarted registry", func() bool { return e.ep.Sessions() == 1 })
	lost := logged.matching(slog.LevelInfo, "registry session lost")
	if len(lost) == 0 {
		t.Fatal("the agent logged no session lost")
	}
	told, ok := strings.CutPrefix(lost[0]["err"], "the registry is stopping: ")
	delay, named := proto.ShutdownDelay(told)
	if !ok || !named {
		t.Fatalf("the agent's session ended with %q, want the registry's shutdown", lost[0]["err"])
	}
	if lost[0]["in"] != delay.String() {
		t.Errorf("the agent waits %s to come back, want the %s the registry named", lost[0]["in"], delay)
	}
}
