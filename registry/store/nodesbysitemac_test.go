package store

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSiteMACs: a site's MACs are those of every node enrolled in a pool of the site and
// not retired, by tenant in enrolment order, each with its node, whatever state the node
// is in; a MAC PXE discovery proposes is not one until it is bound. OnSiteMACs hears of
// the site when its MACs change (an enrolment, a bound MAC, a retirement), not when a
// node's state moves otherwise. Emptied by an earlier version, the index is rebuilt at
// the next open.
func TestSiteMACs(t *testing.T) {
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) { siteMACs(t, b.place(t)) })
	}
}

func siteMACs(t *testing.T, open opener) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	opts := Options{Now: func() time.Time { at = at.Add(time.Second); return at }}
	s, err := open(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	bmcTenants(t, s)
	var mu sync.Mutex
	var told []string
	defer s.OnSiteMACs(func(site string) { mu.Lock(); told = append(told, site); mu.Unlock() })()
	heard := func(want ...string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(told, want) {
			t.Errorf("OnSiteMACs heard %v, want %v", told, want)
		}
		told = nil
	}
	nodesOf := map[string][]string{} // node id -> its MACs, as enrolled or bound
	enroll := func(n Node) Node {
		t.Helper()
		mustUpdate(t, s, func(tx *Tx) (err error) { n, err = tx.CreateNode(n); return err })
		nodesOf[n.ID] = n.MACs
		return n
	}
	first := enroll(Node{Tenant: "beta", Pool: "gpu", MACs: []string{"52:54:00:00:00:09", "52:54:00:00:00:08"}})
	enroll(Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:05"}, State: NodeReady})
	enroll(Node{Tenant: "beta", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}, State: NodeActive})
	enroll(Node{Tenant: "beta", Pool: "far", MACs: []string{"52:54:00:00:00:02"}})
	byUUID := enroll(Node{Tenant: "acme", Pool: "gpu", ProductUUID: "4c4c4544-0000-1000-8000-000000000001"})
	heard("rack-a", "rack-a", "rack-a", "rack-b")
	want := map[string][]string{"acme": {"52:54:00:00:00:05"}, "beta": {"52:54:00:00:00:08", "52:54:00:00:00:09", "52:54:00:00:00:01"}}
	macs := func(want map[string][]string) {
		t.Helper()
		var got map[string][]SiteMAC
		mustUpdate(t, s, func(tx *Tx) (err error) { got, err = tx.SiteMACs("rack-a"); return err })
		if len(got) != len(want) {
			t.Errorf("rack-a's MACs %v, want %v", got, want)
		}
		for tenant, list := range want {
			var macs []string
			for _, m := range got[tenant] {
				macs = append(macs, m.MAC)
				if !slices.Contains(nodesOf[m.Node], m.MAC) {
					t.Errorf("rack-a's %s is told as node %s's, which has %v", m.MAC, m.Node, nodesOf[m.Node])
				}
			}
			if !slices.Equal(macs, list) {
				t.Errorf("rack-a's MACs %v, want %v", got, want)
			}
		}
	}
	macs(want)

	// A proposal is the spoofer's to make: not a MAC of the site until bound.
	mustUpdate(t, s, func(tx *Tx) error {
		_, err := tx.ProposeMAC(byUUID.ID, MACProposal{MAC: "52:54:00:00:00:0a", Site: "rack-a", SeenAt: at})
		return err
	})
	macs(want)
	heard()
	mustUpdate(t, s, func(tx *Tx) error { _, err := tx.BindMAC(byUUID.ID, "52:54:00:00:00:0a", false); return err })
	want["acme"] = append(want["acme"], "52:54:00:00:00:0a")
	nodesOf[byUUID.ID] = []string{"52:54:00:00:00:0a"}
	macs(want)
	heard("rack-a")

	// A state change is not a change of the site's MACs; a retirement is.
	for _, state := range []string{NodeDeploying, NodeActive, NodeRetiring, NodeFailed} {
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.UpdateNode(first.ID, func(n *Node) error { n.State = state; return nil })
			return err
		})
	}
	macs(want)
	heard()
	mustUpdate(t, s, func(tx *Tx) error {
		_, err := tx.UpdateNode(first.ID, func(n *Node) error { n.State = NodeRetired; return nil })
		return err
	})
	want["beta"] = want["beta"][2:]
	macs(want)
	heard("rack-a")

	// A store an earlier version wrote has no entries: the next open writes them.
	clearIndex(t, s, bucketNodesBySiteMAC)
	if err := s.Check(); err == nil || strings.Count(err.Error(), "has a boot MAC with no nodes_by_site_mac entry") != 4 {
		t.Errorf("Check of the emptied index: %v", err)
	}
	s.Close()
	s = openTest(t, open, opts)
	macs(want)
}

// clearIndex removes every entry of the index bucket, as a store written before the
// index existed has none, and returns how many it removed.
func clearIndex(t *testing.T, s *Store, bucket string) (removed int) {
	t.Helper()
	mustUpdate(t, s, func(tx *Tx) error {
		var keys [][]byte
		c := tx.kv.cursor(bucket)
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			keys = append(keys, []byte(string(k)))
		}
		for _, k := range keys {
			if err := tx.del(bucket, k); err != nil {
				return err
			}
		}
		removed = len(keys)
		return nil
	})
	return removed
}
