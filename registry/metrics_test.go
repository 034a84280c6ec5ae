package registry

import (
	"testing"

	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestNodeCountsFollowNodeWritesOnly: the nodes gauge counts again after a commit that
// wrote a node (enrolled, or moved to another state), and a scrape after commits that
// wrote no node (an event, a site) reads no node.
func TestNodeCountsFollowNodeWritesOnly(t *testing.T) {
	st := storetest.Open(t, store.Options{})
	counted := 0
	c := newNodeCounts(st, func() (map[string]int, error) { counted++; return nodesByState(st) })
	scrape := func() map[string]int {
		t.Helper()
		n, err := c.get()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := scrape(); n[store.NodeReady] != 0 || counted != 1 {
		t.Fatalf("an empty store: %v after %d counts", n, counted)
	}
	var id string
	update(t, st, func(tx *store.Tx) error {
		if _, err := tx.CreateTenant("acme"); err != nil {
			return err
		}
		if _, err := tx.CreateSite("rack-a"); err != nil {
			return err
		}
		if _, err := tx.CreatePool(store.Pool{Tenant: "acme", Name: "gpu", Site: "rack-a"}); err != nil {
			return err
		}
		n, err := tx.CreateNode(store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}, State: store.NodeReady})
		id = n.ID
		return err
	})
	if n := scrape(); n[store.NodeReady] != 1 || counted != 2 {
		t.Fatalf("after an enrollment: %v after %d counts, want 1 ready node counted again", n, counted)
	}
	update(t, st, func(tx *store.Tx) error {
		if _, err := tx.AppendEvent(store.Event{Node: id, Tenant: "acme", Kind: store.EventNodeState, To: store.NodeReady}); err != nil {
			return err
		}
		_, err := tx.CreateSite("rack-b")
		return err
	})
	scrape()
	if n := scrape(); n[store.NodeReady] != 1 || counted != 2 {
		t.Fatalf("commits that wrote no node were counted again: %v after %d counts", n, counted)
	}
	update(t, st, func(tx *store.Tx) error {
		_, err := tx.UpdateNode(id, func(n *store.Node) error { n.State = store.NodeActive; return nil })
		return err
	})
	if n := scrape(); n[store.NodeReady] != 0 || n[store.NodeActive] != 1 || counted != 3 {
		t.Fatalf("after a move to active: %v after %d counts", n, counted)
	}
	if n := scrape(); len(n) != len(metal.States()) {
		t.Errorf("the gauge shows %d states, want every state of the lifecycle (%d)", len(n), len(metal.States()))
	}
}

func update(t *testing.T, st *store.Store, fn func(tx *store.Tx) error) {
	t.Helper()
	if err := st.Update(fn); err != nil {
		t.Fatal(err)
	}
}
