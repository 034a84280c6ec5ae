package agentplane

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
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
		_, err := e.ep.Relay(context.Background(), "gpu-1", proto.Command{ID: "across", Kind: "slow"})
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
	res, err := e.ep.Relay(ctx, "gpu-1", proto.Command{ID: "across", Kind: "slow"})
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
// reconnect slot (1/900 s) apart, so that a fleet told at once does not return at once.
func TestStopSpacesTheReturns(t *testing.T) {
	e := newEnv(t, agents.Config{})
	const n = 20
	var told []*toldMoment
	for i := range n {
		told = append(told, watchClose(helloOverQUIC(t, e, nodeName(i))))
	}
	waitFor(t, "every session", func() bool { return e.ep.Sessions() == n })
	// One more agent is connected but has not said hello: the endpoint knows no session
	// of it when it stops.
	late := watchClose(dialQUIC(t, e, "late"))
	waitFor(t, "the late agent's handshake", func() bool { return e.ep.Handshakes().Accepted == n+1 })
	e.stop()
	var moments []time.Time
	for _, m := range told {
		moments = append(moments, m.get(t))
	}
	slices.SortFunc(moments, time.Time.Compare)
	// The phrase counts whole milliseconds: the last comes about n-1 slots after the first.
	if spread := moments[n-1].Sub(moments[0]); spread < 10*time.Millisecond || spread > 100*time.Millisecond {
		t.Errorf("the %d returns are spread over %v, want about %d slots of 1/900 s", n, spread, n-1)
	}
	if m := late.get(t); m.Before(moments[n-1].Add(-2 * time.Millisecond)) {
		t.Errorf("the agent without a session yet is to return %v before the last of the others", moments[n-1].Sub(m))
	}
}

// toldMoment is when a closed connection was told to come back: when it was closed plus
// the delay its CloseShutdown names.
type toldMoment struct {
	conn   *quic.Conn
	closed chan time.Time
}

func watchClose(c *quic.Conn) *toldMoment {
	m := &toldMoment{conn: c, closed: make(chan time.Time, 1)}
	context.AfterFunc(c.Context(), func() { m.closed <- time.Now() })
	return m
}

func (m *toldMoment) get(t *testing.T) time.Time {
	t.Helper()
	at := <-m.closed
	cause := context.Cause(m.conn.Context())
	ae, ok := errors.AsType[*quic.ApplicationError](cause)
	if !ok || proto.CloseCode(ae.ErrorCode) != proto.CloseShutdown {
		t.Fatalf("closed with %v, want CloseShutdown", cause)
	}
	d, ok := proto.ShutdownDelay(ae.ErrorMessage)
	if !ok {
		t.Fatalf("reason %q names no delay", ae.ErrorMessage)
	}
	return at.Add(d)
}

// helloOverQUIC opens a session for node over bare QUIC (dialQUIC, then a hello on the
// session stream).
func helloOverQUIC(t *testing.T, e *env, node string) *quic.Conn {
	t.Helper()
	conn, _ := sessionOverQUIC(t, e, node)
	return conn
}

// sessionOverQUIC is helloOverQUIC, returning the session stream too.
func sessionOverQUIC(t *testing.T, e *env, node string) (*quic.Conn, *quic.Stream) {
	t.Helper()
	conn := dialQUIC(t, e, node)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.WriteMessage(stream, &proto.Message{Type: proto.MsgHello, Hello: &proto.Hello{}}); err != nil {
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
