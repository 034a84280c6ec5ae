package agentplane

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/quic-go/quic-go"
)

// TestOneAgentHoldsOneConnectionInHello: the root user of a tenant's machine, holding
// its agent's key, opens 16 connections with a client of its own, on each the session
// stream and a hello frame announcing 4 MiB of which it sends 1 MiB and no more, each
// held by the registry for its hello's wait (10 s), a frame's bytes at a time. The
// registry keeps one of them, the newest: each closes the one before it (CloseReplaced),
// so one certificate holds at most one partial hello, 4 MiB, however many connections it
// opens. The agent's next hello is taken as before. Before, all 16 were held, 16 MiB of
// partial hellos, and a thousand would have held 4 GiB.
func TestOneAgentHoldsOneConnectionInHello(t *testing.T) {
	const n = 16
	e := newEnv(t, agents.Config{})
	var conns []*quic.Conn
	for range n {
		conn := dialQUIC(t, e, "gpu-1")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		stream, err := conn.OpenStreamSync(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		frame := binary.BigEndian.AppendUint32(nil, proto.MaxFrame)
		frame = append(frame, `{"type":"hello","hello":{"inventory":{"cpu":"`+strings.Repeat("x", 1<<20)...)
		stream.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := stream.Write(frame); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	held := func() int {
		open := 0
		for _, c := range conns {
			if c.Context().Err() == nil {
				open++
			}
		}
		return open
	}
	deadline := time.Now().Add(5 * time.Second) // within the hello's wait
	for held() > 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := held(); got != 1 || conns[n-1].Context().Err() != nil {
		t.Fatalf("%d of one agent's %d connections held in their hello (the newest held: %v), want the newest alone",
			got, n, conns[n-1].Context().Err() == nil)
	}
	for _, c := range conns[:n-1] {
		if ae, ok := errors.AsType[*quic.ApplicationError](context.Cause(c.Context())); !ok || proto.CloseCode(ae.ErrorCode) != proto.CloseReplaced {
			t.Fatalf("an older connection in its hello closed with %v, want CloseReplaced", context.Cause(c.Context()))
		}
	}
	sessionOverQUIC(t, e, "gpu-1", proto.Hello{})
	waitFor(t, "the agent's next session", func() bool { return e.ep.Connected("gpu-1", proto.RoleNode) })
}
