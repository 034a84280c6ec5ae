package agents

import (
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestWaitObserved: WaitObserved returns at once for a node without a NodeSpec, waits
// while the agent has not applied it, and wakes at the commit that records it applied.
func TestWaitObserved(t *testing.T) {
	st := storetest.Open(t, store.Options{})
	e := &Endpoint{cfg: Config{Store: st}}
	defer st.OnWrite(e.observe.notify, store.BucketAgentStatus)() // as Start does
	if err := e.WaitObserved(t.Context(), "nd_1"); err != nil {
		t.Fatalf("a node without a NodeSpec: %v", err)
	}
	err := st.Update(func(tx *store.Tx) error {
		_, err := tx.SetNodeSpec(proto.NodeSpec{Node: "nd_1", Role: proto.RoleNode})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.WaitObserved(t.Context(), "nd_1") }()
	select {
	case err := <-done:
		t.Fatalf("returned %v before the agent applied generation 1", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := st.Update(func(tx *store.Tx) error { return tx.RecordObservedGeneration("nd_1", 1) }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting after the agent applied generation 1")
	}
}
