package agentplane

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// inventoryLog records what the endpoint's OnInventory hook saw.
type inventoryLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *inventoryLog) add(node, section string, data json.RawMessage) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, node+" "+section+" "+string(data))
}

func (l *inventoryLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

func TestHelloPushAck(t *testing.T) {
	var inv inventoryLog
	e := newEnv(t, agents.Config{OnInventory: inv.add})
	if gen := e.setSpec("gpu-1", map[string]string{"rack": "a"}); gen != 1 {
		t.Fatalf("first generation %d", gen)
	}
	failGen := int64(-1)
	var failMu sync.Mutex
	a := e.startAgent("gpu-1", func(c *session.Config) {
		c.Inventory = map[string]json.RawMessage{"system": raw(`{"cpus": 64}`)}
		apply := c.Apply
		c.Apply = func(ctx context.Context, spec proto.NodeSpec) error {
			failMu.Lock()
			defer failMu.Unlock()
			if spec.Generation == failGen {
				return errors.New("sysctl: permission denied")
			}
			return apply(ctx, spec)
		}
	})

	t.Run("hello brings the agent up to date", func(t *testing.T) {
		waitFor(t, "observedGeneration 1", func() bool { return e.status("gpu-1").ObservedGeneration == 1 })
		got := a.lastApplied()
		want := proto.NodeSpec{Node: "gpu-1", Role: proto.RoleNode, Generation: 1, Labels: map[string]string{"rack": "a"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("applied (-want +got):\n%s", diff)
		}
		if a.ObservedGeneration() != 1 {
			t.Errorf("agent observed %d", a.ObservedGeneration())
		}
	})
	t.Run("hello inventory is stored and hooked", func(t *testing.T) {
		waitFor(t, "inventory hook", func() bool { return len(inv.get()) == 1 })
		if diff := cmp.Diff([]string{`gpu-1 system {"cpus":64}`}, inv.get()); diff != "" {
			t.Errorf("hook (-want +got):\n%s", diff)
		}
	})
	t.Run("a bump is pushed to the connected agent", func(t *testing.T) {
		gen := e.setSpec("gpu-1", map[string]string{"rack": "b"})
		waitFor(t, "observedGeneration 2", func() bool { return e.status("gpu-1").ObservedGeneration == gen })
		if got := a.lastApplied().Labels["rack"]; got != "b" {
			t.Errorf("applied rack %q, want b", got)
		}
	})
	t.Run("a failed apply is recorded", func(t *testing.T) {
		failMu.Lock()
		failGen = 3
		failMu.Unlock()
		e.setSpec("gpu-1", map[string]string{"rack": "c"})
		waitFor(t, "apply failure", func() bool { return e.status("gpu-1").FailedGeneration == 3 })
		got := e.status("gpu-1")
		want := store.AgentStatus{Node: "gpu-1", ObservedGeneration: 2, FailedGeneration: 3,
			ApplyError: &proto.Error{Code: proto.DriverError, Message: "apply NodeSpec: sysctl: permission denied"}}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(store.AgentStatus{}, "UpdatedAt"), cmpopts.IgnoreUnexported(proto.Error{})); diff != "" {
			t.Errorf("status (-want +got):\n%s", diff)
		}
	})
	t.Run("the next generation clears the failure", func(t *testing.T) {
		gen := e.setSpec("gpu-1", map[string]string{"rack": "d"})
		waitFor(t, "observedGeneration 4", func() bool { return e.status("gpu-1").ObservedGeneration == gen })
		if st := e.status("gpu-1"); st.ApplyError != nil {
			t.Errorf("failure kept: %+v", st)
		}
	})
	t.Run("inventory updates on the session", func(t *testing.T) {
		a.SetInventory("nics", raw(`[{"mac":"52:54:00:00:00:01"}]`))
		a.SetInventory("system", raw(`{"cpus": 64}`)) // unchanged: no hook
		a.SetInventory("gpus", raw(`[]`))
		waitFor(t, "inventory hooks", func() bool { return len(inv.get()) == 3 })
		var sections []string
		e.st.View(func(tx *store.Tx) error {
			all, err := tx.Inventory("gpu-1")
			for _, s := range all {
				sections = append(sections, s.Section+" "+string(s.Data))
			}
			return err
		})
		want := []string{`gpus []`, `nics [{"mac":"52:54:00:00:00:01"}]`, `system {"cpus":64}`}
		if diff := cmp.Diff(want, sections); diff != "" {
			t.Errorf("stored inventory (-want +got):\n%s", diff)
		}
	})
}

// TestARamdiskAcknowledgesNoNodeSpec: a ramdisk agent is pushed no NodeSpec, so what it
// says of a generation, in its hello or in an ack, as a tampered ramdisk (or one whose
// token another host read) would, is never recorded as the installed host's: a workflow
// waiting for the host to apply its NodeSpec would otherwise go on.
func TestARamdiskAcknowledgesNoNodeSpec(t *testing.T) {
	var inv inventoryLog
	e := newEnv(t, agents.Config{OnInventory: inv.add})
	gen := e.setSpec("gpu-1", map[string]string{"rack": "a"})
	ramdisk := func(node string, observed int64) *agent {
		cert, err := e.ca.AgentCertificate(node, string(proto.RoleRamdisk))
		if err != nil {
			t.Fatal(err)
		}
		return e.startAgent(node, func(c *session.Config) { c.Certificate, c.ObservedGeneration = cert, observed })
	}
	t.Run("an ack", func(t *testing.T) {
		a := ramdisk("gpu-1", 0)
		waitFor(t, "the ramdisk's session", a.Connected)
		a.Acknowledge(gen)
		// Sent after the ack, on its session or in the hello of the next: once it is
		// stored, the ack was handled.
		a.SetInventory(proto.SectionSystem, raw(`{"cpus":8}`))
		waitFor(t, "the ramdisk's inventory", func() bool { return len(inv.get()) == 1 })
		if st := e.status("gpu-1"); st.ObservedGeneration != 0 {
			t.Errorf("a ramdisk's ack recorded the host's generation: %+v", st)
		}
	})
	t.Run("a hello of a node with no NodeSpec", func(t *testing.T) {
		a := ramdisk("gpu-2", 7)
		waitFor(t, "the ramdisk's session", a.Connected)
		a.SetInventory(proto.SectionSystem, raw(`{"cpus":8}`))
		waitFor(t, "the ramdisk's inventory", func() bool { return len(inv.get()) == 2 })
		if st := e.status("gpu-2"); st.ObservedGeneration != 0 {
			t.Errorf("a ramdisk's hello recorded a generation: %+v", st)
		}
	})
}

// TestAnApplyFailureIsCut: a machine's root user, with a client of its own and the
// agent's key, acknowledges its NodeSpec as failed with an error of 3 MiB (a message, a
// path and a reason). The registry keeps the failure with its message cut to
// proto.MaxErrorMessage and its details in proportion, as it cuts an agent's answer to a
// command: before, the whole error was stored in the node's agent status (a record of 3
// MiB on bbolt, past what an etcd request takes) and logged.
func TestAnApplyFailureIsCut(t *testing.T) {
	e := newEnv(t, agents.Config{})
	gen := e.setSpec("gpu-1", nil)
	_, stream := sessionOverQUIC(t, e, "gpu-1", proto.Hello{})
	huge := strings.Repeat("e", 3<<20)
	ack := proto.Ack{Generation: gen, Error: &proto.Error{Code: proto.DriverError, Message: huge, Details: proto.Details{Path: huge[:64<<10], Reason: huge[:64<<10]}}}
	if err := proto.WriteMessage(stream, &proto.Message{Type: proto.MsgAck, Ack: &ack}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the apply failure recorded", func() bool { return e.status("gpu-1").FailedGeneration == gen })
	got := e.status("gpu-1").ApplyError
	if got == nil {
		t.Fatal("the apply failure was recorded without its error")
	}
	if got.Code != proto.DriverError || len(got.Message) > proto.MaxErrorMessage || len(got.Details.Path) > proto.MaxErrorMessage/4 || len(got.Details.Reason) > proto.MaxErrorMessage/4 {
		t.Fatalf("the apply failure kept: code %v, a message of %d bytes, a path of %d, a reason of %d; want DRIVER_ERROR, at most %d, %d and %d",
			got.Code, len(got.Message), len(got.Details.Path), len(got.Details.Reason), proto.MaxErrorMessage, proto.MaxErrorMessage/4, proto.MaxErrorMessage/4)
	}
}
