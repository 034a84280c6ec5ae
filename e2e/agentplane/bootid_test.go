package agentplane

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
	"github.com/quic-go/quic-go"
)

// TestAReconnectIsNoRejoin: the boot id an agent's hello tells is recorded with its join,
// and a wait for the machine's rejoin (await: rejoin, as a step that started while that
// boot's agent was the machine's records it) is not ended by that agent's session coming
// back (a new session of the same boot, as after a registry replica died), only by the
// session of an agent of the next boot.
func TestAReconnectIsNoRejoin(t *testing.T) {
	const before, after = "0b1e7a52-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "9f8e7d6c-5b4a-4321-8fed-cba987654321"
	ca, server := newCA(t)
	e := startEnv(t, &env{t: t, ca: ca, server: server, dir: t.TempDir(), addr: "127.0.0.1:0", recordSessions: true})
	joins := workflow.NewJoinLog(e.st, store.Holder{})
	// joined is the node's agent's last join as the store holds it.
	joined := func() store.AgentJoin {
		var j store.AgentJoin
		e.st.View(func(tx *store.Tx) error { all, err := tx.AgentJoins("gpu-1"); j = all["node"]; return err })
		return j
	}
	boot := func(id string) func(*session.Config) { return func(c *session.Config) { c.BootID = id } }

	_, stop := e.runAgent("gpu-1", boot(before))
	waitFor(t, "the first session's join", func() bool { return joined().BootID == before })
	first := joined().JoinedAt
	stop()
	since := first.Add(time.Nanosecond) // the step started after that join
	done := make(chan error, 1)
	go func() { done <- joins.WaitJoined(t.Context(), "gpu-1", "", since, before) }()

	_, stop = e.runAgent("gpu-1", boot(before))
	waitFor(t, "the reconnect's join", func() bool { return joined().JoinedAt.After(first) })
	select {
	case err := <-done:
		t.Fatalf("a reconnect of the boot the wait started in ended it (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	stop()

	e.startAgent("gpu-1", boot(after))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the agent of the next boot joined and the wait goes on")
	}
	if got := joined().BootID; got != after {
		t.Errorf("the join recorded the boot %q, want %q", got, after)
	}
}

// TestAHelloOfNoBootIDIsRefused: a hello whose boot id is not one (what a modified agent
// could send) ends the session as a protocol error whose reason names the field
// (hello.bootId) and records no join; the agent's own library refuses to send one.
func TestAHelloOfNoBootIDIsRefused(t *testing.T) {
	var sessions atomic.Int32
	e := newEnv(t, agents.Config{OnSession: func(string, proto.Role, time.Time, string) error { sessions.Add(1); return nil }})
	conn, _ := sessionOverQUIC(t, e, "gpu-1", proto.Hello{BootID: "reboot-me"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	select {
	case <-conn.Context().Done():
	case <-ctx.Done():
		t.Fatal("the endpoint kept a session whose hello tells no boot id")
	}
	var appErr *quic.ApplicationError
	if !errors.As(context.Cause(conn.Context()), &appErr) || !appErr.Remote || appErr.ErrorCode != quic.ApplicationErrorCode(proto.CloseProtocol) {
		t.Fatalf("the session ended with %v, want the endpoint closing it as a protocol error", context.Cause(conn.Context()))
	}
	if !strings.Contains(appErr.ErrorMessage, "(at hello.bootId)") || !strings.Contains(appErr.ErrorMessage, `"reboot-me"`) {
		t.Errorf("the close reason %q does not name the field at fault (hello.bootId) and its value", appErr.ErrorMessage)
	}
	if e.ep.Sessions() != 0 || sessions.Load() != 0 {
		t.Errorf("%d sessions held, %d recorded; want none", e.ep.Sessions(), sessions.Load())
	}
	cert, err := e.ca.AgentCertificate("gpu-1", string(proto.RoleNode))
	if err != nil {
		t.Fatal(err)
	}
	_, err = session.New(session.Config{Addr: e.addr, Certificate: cert, ServerCAs: e.ca.Pool(), BootID: "reboot-me", Log: testLog(t)})
	if e, ok := errors.AsType[*proto.Error](err); !ok || e.Code != proto.InvalidConfig || e.Details.Path != "bootID" {
		t.Errorf("session.New with a boot id that is none: %v, want INVALID_CONFIG at bootID", err)
	}
}
