package agentplane

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
)

// TestAFloodOfReportsIsPaced: the root user of a tenant's machine, holding its agent's
// key, sends with a client of its own 400 acks alternating a generation applied and
// another failed and 400 `cpu` inventory sections alternating two values, then a third
// of each, as fast as the registry reads them. Each recorded is a write of the store
// every tenant shares: the registry writes 16 at once and then one every half second,
// each the latest ack, apply failure or section it was sent (the others are replaced
// before they are written), and the last of each is stored within a second of the
// flood's end. Before, every message was a write (802 of them, for 10 s, the last stored
// 2.7 s after it was sent).
func TestAFloodOfReportsIsPaced(t *testing.T) {
	const n = 400
	var inventoryWrites atomic.Int64
	e := newEnv(t, agents.Config{OnInventory: func(string, string, json.RawMessage) { inventoryWrites.Add(1) }})
	var statusWrites atomic.Int64
	defer e.st.OnWrite(func() { statusWrites.Add(1) }, store.BucketAgentStatus)()
	_, stream := sessionOverQUIC(t, e, "gpu-1", proto.Hello{})
	waitFor(t, "the session", func() bool { return e.ep.Connected("gpu-1", proto.RoleNode) })

	start := time.Now()
	for i := range n + 1 { // the last of each a value sent only then
		v := 1 + i%2
		if i == n {
			v = 3
		}
		ack := proto.Message{Type: proto.MsgAck, Ack: &proto.Ack{Generation: int64(v)}}
		if v == 2 {
			ack.Ack.Error = proto.Errorf(proto.DriverError, "apply failed")
		}
		inv := proto.Message{Type: proto.MsgInventory, Inventory: &proto.Inventory{Section: proto.SectionCPU, Data: raw(fmt.Sprintf(`{"cores":%d}`, v))}}
		for _, m := range []*proto.Message{&ack, &inv} {
			if err := proto.WriteMessage(stream, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	sent := time.Now()
	// The last of each: generation 3 applied (which clears the failure of 2), 3 cores.
	last := func() bool {
		st := e.status("gpu-1")
		return st.ObservedGeneration == 3 && st.FailedGeneration == 0 && string(e.section("gpu-1", proto.SectionCPU)) == `{"cores":3}`
	}
	waitUntil(t, "the last ack and section stored", 20*time.Second, 5*time.Millisecond, last)
	stored := time.Now()
	time.Sleep(time.Second) // nothing more is written
	writes := statusWrites.Load() + inventoryWrites.Load()
	// 16 at once, then one every 500 ms, for as long as the flood lasted.
	bound := 16 + 2*int64(math.Ceil(stored.Sub(start).Seconds()))
	t.Logf("%d messages sent in %v, the last stored %v after: %d acks and %d sections written",
		2*(n+1), sent.Sub(start), stored.Sub(sent), statusWrites.Load(), inventoryWrites.Load())
	if writes > bound {
		t.Fatalf("%d writes for one agent's flood of %d messages over %v, want at most %d", writes, 2*(n+1), stored.Sub(start), bound)
	}
	if d := stored.Sub(sent); d > time.Second {
		t.Fatalf("the last ack and section stored %v after they were sent, want within a second", d)
	}
	if !e.ep.Connected("gpu-1", proto.RoleNode) {
		t.Fatal("the session ended")
	}
}

// TestAnHonestAgentsReportsAreNotHeld: an agent acknowledges its NodeSpec as it
// connects, then applies the next one and reports every section of a hardware refresh
// and its host's convergence at once. None of it waits for the spacing that holds a
// flood (each ack and section is stored within 400 ms, less than the half second a held
// one waits), and each is stored as sent.
func TestAnHonestAgentsReportsAreNotHeld(t *testing.T) {
	var inv inventoryLog
	e := newEnv(t, agents.Config{OnInventory: inv.add})
	e.setSpec("gpu-1", nil)
	a := e.startAgent("gpu-1", nil)
	waitFor(t, "generation 1 applied", func() bool { return e.status("gpu-1").ObservedGeneration == 1 })
	sections := []string{proto.SectionSystem, proto.SectionNICs, proto.SectionDisks, proto.SectionCPU, proto.SectionMemory, proto.SectionGPUs, proto.SectionHost}
	start := time.Now()
	gen := e.setSpec("gpu-1", map[string]string{"round": "2"})
	for i, section := range sections {
		a.SetInventory(section, raw(fmt.Sprintf(`{"n":%d}`, i)))
	}
	waitFor(t, "the ack and every section stored", func() bool {
		return e.status("gpu-1").ObservedGeneration == gen && len(inv.get()) == len(sections)
	})
	if took := time.Since(start); took > 400*time.Millisecond {
		t.Fatalf("an honest agent's ack and %d sections stored %v after they were sent, want within 400 ms", len(sections), took)
	}
	for i, section := range sections {
		if want := fmt.Sprintf(`gpu-1 %s {"n":%d}`, section, i); !slices.Contains(inv.get(), want) {
			t.Errorf("stored %q, want %q among them", inv.get(), want)
		}
	}
}

// TestAReplacedSessionsWaitingReportsAreDropped: an agent's session sends 40 `cpu`
// sections at once, the last of them waiting for the spacing, and the agent connects
// again (a restart of its own), its hello carrying the section as it is now. The
// section that waited on the replaced session is never recorded over the newer
// hello's: the store keeps the agent's latest.
func TestAReplacedSessionsWaitingReportsAreDropped(t *testing.T) {
	var inv inventoryLog
	e := newEnv(t, agents.Config{OnInventory: inv.add})
	_, stream := sessionOverQUIC(t, e, "gpu-1", proto.Hello{})
	waitFor(t, "the session", func() bool { return e.ep.Connected("gpu-1", proto.RoleNode) })
	for i := range 40 {
		m := proto.Message{Type: proto.MsgInventory, Inventory: &proto.Inventory{Section: proto.SectionCPU, Data: raw(fmt.Sprintf(`{"n":%d}`, i))}}
		if err := proto.WriteMessage(stream, &m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the sections recorded at once", func() bool { return len(inv.get()) >= 16 })
	now := raw(`{"n":"now"}`)
	sessionOverQUIC(t, e, "gpu-1", proto.Hello{Inventory: map[string]json.RawMessage{proto.SectionCPU: now}})
	cpu := func() string { return string(e.section("gpu-1", proto.SectionCPU)) }
	waitFor(t, "the newer hello's section", func() bool { return cpu() == string(now) })
	time.Sleep(time.Second) // past the spacing
	if got := cpu(); got != string(now) {
		t.Fatalf("cpu section %s once the spacing passed, want the newer hello's %s", got, now)
	}
}
