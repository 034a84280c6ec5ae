package agentplane

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
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

// TestHellosArePaced: the root user of a tenant's machine, holding its agent's key,
// connects again and again with a client of its own, 60 times, each hello reporting
// another generation applied and another `cpu` section than the last (alternating two
// of each), then a third of each. Each recorded is a write of the store every tenant
// shares: the registry writes those of its hellos as it does an agent's reports, the
// agent's sessions one after the other sharing its spacing, 16 at once and then one
// every half second, and the last hello's are stored all the same. The agent's first
// hello is written at once. Before, each hello was written as it came, two writes for
// each reconnect, bounded only by the handshakes.
func TestHellosArePaced(t *testing.T) {
	const n = 60
	var inventoryWrites, hellos atomic.Int64
	e := newEnv(t, agents.Config{
		OnInventory: func(string, string, json.RawMessage) { inventoryWrites.Add(1) },
		OnSession:   func(string, proto.Role, time.Time, string) error { hellos.Add(1); return nil },
	})
	var statusWrites atomic.Int64
	defer e.st.OnWrite(func() { statusWrites.Add(1) }, store.BucketAgentStatus)()
	stored := func(v int) bool {
		return e.status("gpu-1").ObservedGeneration == int64(v) && string(e.section("gpu-1", proto.SectionCPU)) == fmt.Sprintf(`{"cores":%d}`, v)
	}

	start := time.Now()
	for i := range n + 1 {
		v := 1 + i%2
		if i == n {
			v = 3
		}
		conn, _ := sessionOverQUIC(t, e, "gpu-1", proto.Hello{ObservedGeneration: int64(v),
			Inventory: map[string]json.RawMessage{proto.SectionCPU: raw(fmt.Sprintf(`{"cores":%d}`, v))}})
		// Each hello taken before the next connection: one still awaiting its hello
		// would be closed by the next.
		waitFor(t, "the hello taken", func() bool { return hellos.Load() == int64(i+1) })
		if i == 0 && !stored(1) {
			t.Fatal("the agent's first hello was not written at once")
		}
		if i%2 == 1 {
			// Every other session ends before the next opens, so that the next does not
			// replace it: the pace outlives the session, not only a replaced one.
			conn.CloseWithError(0, "")
			waitFor(t, "the session ended", func() bool { return !e.ep.Connected("gpu-1", proto.RoleNode) })
		}
	}
	sent := time.Now()
	waitUntil(t, "the last hello's generation and section stored", 30*time.Second, 5*time.Millisecond, func() bool { return stored(3) })
	done := time.Now()
	time.Sleep(time.Second) // nothing more is written
	writes := statusWrites.Load() + inventoryWrites.Load()
	// 16 at once, then one every 500 ms, for as long as the reconnects lasted.
	bound := 16 + 2*int64(math.Ceil(done.Sub(start).Seconds()))
	t.Logf("%d hellos in %v, the last stored %v after: %d generations and %d sections written",
		n+1, sent.Sub(start), done.Sub(sent), statusWrites.Load(), inventoryWrites.Load())
	if writes > bound {
		t.Fatalf("%d writes for one agent's %d hellos over %v, want at most %d", writes, n+1, done.Sub(start), bound)
	}
}

// TestARefusedSectionIsLoggedOnceAMinute: the root user of a tenant's machine, holding
// its agent's key, sends with a client of its own 200 `inventory` messages of a section
// its role does not report, then says hello 10 times, each time with such a section.
// None is stored and the session goes on; the registry warns of each kind once (the
// sections sent, those of the hellos), however many come within the minute: each
// refusal costs no write, but each logged would fill the registry's log as fast as the
// agent sends. Before, each message was logged as an error, and each hello warned.
func TestARefusedSectionIsLoggedOnceAMinute(t *testing.T) {
	logs := &records{}
	var hellos atomic.Int64
	ca, server := newCA(t)
	e := startEnv(t, &env{t: t, ca: ca, server: server, dir: t.TempDir(), addr: "127.0.0.1:0", log: slog.New(logs),
		hooks: agents.Config{OnSession: func(string, proto.Role, time.Time, string) error { hellos.Add(1); return nil }}})
	cpu := func(v int) bool {
		return string(e.section("gpu-1", proto.SectionCPU)) == fmt.Sprintf(`{"cores":%d}`, v)
	}
	_, stream := sessionOverQUIC(t, e, "gpu-1", proto.Hello{})
	for i := range 200 {
		m := proto.Message{Type: proto.MsgInventory, Inventory: &proto.Inventory{Section: fmt.Sprintf("not-mine-%d", i%3), Data: raw(`{}`)}}
		if err := proto.WriteMessage(stream, &m); err != nil {
			t.Fatal(err)
		}
	}
	m := proto.Message{Type: proto.MsgInventory, Inventory: &proto.Inventory{Section: proto.SectionCPU, Data: raw(`{"cores":1}`)}}
	if err := proto.WriteMessage(stream, &m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the section sent after the refused ones stored", func() bool { return cpu(1) })
	for i := range 10 {
		sessionOverQUIC(t, e, "gpu-1", proto.Hello{Inventory: map[string]json.RawMessage{"not-mine": raw(`{}`), proto.SectionCPU: raw(fmt.Sprintf(`{"cores":%d}`, i+2))}})
		waitFor(t, "the hello taken", func() bool { return hellos.Load() == int64(i+2) })
	}
	waitFor(t, "the last hello's section stored", func() bool { return cpu(11) })
	errs := logs.count(slog.LevelError, "")
	sessionWarns := logs.count(slog.LevelWarn, "agent inventory section refused")
	helloWarns := logs.count(slog.LevelWarn, "agent hello: inventory sections not kept")
	if errs != 0 || sessionWarns != 1 || helloWarns != 1 {
		t.Fatalf("200 sections of another role and 10 hellos with one logged %d errors, %d and %d warnings; want none, and one warning of each kind",
			errs, sessionWarns, helloWarns)
	}
}
