package store

import (
	"fmt"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

func TestBMCHost(t *testing.T) {
	for address, want := range map[string]string{
		"10.20.0.5":                    "10.20.0.5",
		"10.20.0.5:443":                "10.20.0.5",
		"https://10.20.0.5":            "10.20.0.5",
		"https://10.20.0.5:8443/redfi": "10.20.0.5",
		"https://[::ffff:10.20.0.5]":   "10.20.0.5",
		"[fd00:20::5]:623":             "fd00:20::5",
		"https://[FD00:20:0::5]":       "fd00:20::5",
		"/run/bmc.sock":                "unix:/run/bmc.sock",
		"unix:/run//x/../bmc.sock":     "unix:/run/bmc.sock",
		"unix:///run/bmc.sock":         "unix:/run/bmc.sock",
		"https://BMC.example:443":      "bmc.example",
	} {
		if got := bmcHost(address); got != want {
			t.Errorf("bmcHost(%q) = %q, want %q", address, got, want)
		}
	}
}

// bmcTenants makes tenants acme and beta, sites rack-a and rack-b, pool gpu of each
// tenant at rack-a and beta's pool far at rack-b.
func bmcTenants(t *testing.T, s *Store) {
	t.Helper()
	makePool(t, s)
	mustUpdate(t, s, func(tx *Tx) error {
		if _, err := tx.CreateTenant("beta"); err != nil {
			return err
		}
		if _, err := tx.CreateSite("rack-b"); err != nil {
			return err
		}
		if _, err := tx.CreatePool(Pool{Tenant: "beta", Name: "gpu", Site: "rack-a"}); err != nil {
			return err
		}
		_, err := tx.CreatePool(Pool{Tenant: "beta", Name: "far", Site: "rack-b"})
		return err
	})
}

// bmcNode enrolls a machine of MAC 52:54:00:00:01:NN in pool of tenant, its BMC at
// address, bound by the platform when platform.
func bmcNode(s *Store, tenant, pool string, nn int, address string, platform bool) (n Node, err error) {
	err = s.Update(func(tx *Tx) (err error) {
		n, err = tx.CreateNode(Node{Tenant: tenant, Pool: pool, MACs: []string{fmt.Sprintf("52:54:00:00:01:%02x", nn)},
			BMC: BMC{Driver: "redfish", Address: address}, PlatformBMC: platform})
		return err
	})
	return n, err
}

// refusedBMC fails t unless err is CONFLICT at bmc.address saying "another tenant" and
// naming none of hidden.
func refusedBMC(t *testing.T, what string, err error, hidden ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: bound; want CONFLICT at bmc.address, by another tenant", what)
		return
	}
	e := proto.AsError(err)
	if e.Code != proto.Conflict || e.Details.Path != "bmc.address" || !strings.Contains(e.Message, "another tenant") {
		t.Errorf("%s: %v; want CONFLICT at bmc.address, by another tenant", what, err)
		return
	}
	for _, h := range hidden {
		if strings.Contains(e.Message, h) {
			t.Errorf("%s: %q names %s", what, e.Message, h)
		}
	}
}

// TestNodesByBMC: a BMC is one tenant's within its site, whatever form its address
// takes; the same tenant's nodes, another site's and the platform's bindings share it;
// a retired node releases it.
func TestNodesByBMC(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		bmcTenants(t, s)
		a, err := bmcNode(s, "acme", "gpu", 1, "https://10.20.0.5", false)
		if err != nil {
			t.Fatal(err)
		}
		for i, address := range []string{"10.20.0.5", "10.20.0.5:443", "https://10.20.0.5:8443", "https://[::ffff:10.20.0.5]/redfish/v1"} {
			_, err := bmcNode(s, "beta", "gpu", 10+i, address, false)
			refusedBMC(t, "beta enrolling with acme's BMC "+address, err, a.ID, "acme")
		}
		a2, err := bmcNode(s, "acme", "gpu", 2, "10.20.0.5:443", false)
		if err != nil {
			t.Fatalf("acme's second system on its BMC: %v", err)
		}
		if _, err := bmcNode(s, "beta", "far", 3, "10.20.0.5", false); err != nil {
			t.Fatalf("beta's BMC of the same address at another site: %v", err)
		}
		b, err := bmcNode(s, "beta", "gpu", 4, "10.20.0.6", false)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Update(func(tx *Tx) error {
			_, err := tx.UpdateNode(b.ID, func(n *Node) error { n.BMC.Address = "https://10.20.0.5"; return nil })
			return err
		})
		refusedBMC(t, "beta moving its node to acme's BMC", err, a.ID, "acme")
		s.View(func(tx *Tx) error {
			if got, _ := tx.Node(b.ID); got.BMC.Address != "10.20.0.6" || got.Rev != b.Rev {
				t.Errorf("beta's node after the refusal: %+v", got)
			}
			return nil
		})

		p, err := bmcNode(s, "beta", "gpu", 5, "https://10.20.0.5", true)
		if err != nil {
			t.Fatalf("the platform binding beta's node to acme's BMC: %v", err)
		}
		_, err = bmcNode(s, "acme", "gpu", 6, "10.20.0.5", false)
		refusedBMC(t, "acme binding a BMC the platform bound to beta's node", err, p.ID, "beta")
		err = s.Update(func(tx *Tx) error {
			_, err := tx.UpdateNode(p.ID, func(n *Node) error { n.PlatformBMC = false; return nil })
			return err
		})
		refusedBMC(t, "beta taking the platform's binding as its own", err, a.ID, "acme")

		for _, id := range []string{a.ID, a2.ID} {
			mustUpdate(t, s, func(tx *Tx) error {
				_, err := tx.UpdateNode(id, func(n *Node) error { n.State = NodeRetired; return nil })
				return err
			})
		}
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.UpdateNode(b.ID, func(n *Node) error { n.BMC.Address = "https://10.20.0.5"; return nil })
			return err
		})
	})
}

// TestNodesByBMCReindexed: at every open the store makes nodes_by_bmc say what its nodes
// bind. A store whose nodes were enrolled before the index existed (or by a replica of
// that version since) has no entries: Check reports each node, and opened again the
// store indexes them and refuses another tenant's binding of their BMCs. An entry such a
// replica left behind when it moved a node to another BMC, or retired it, is dropped, so
// that BMC is free again. The store holds more nodes than a page of a list and than a
// reindexing chunk: every one is indexed (before, only those of the first page were, and
// the others' BMCs were free to another tenant).
func TestNodesByBMCReindexed(t *testing.T) {
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) {
			open := b.place(t)
			s, err := open(t, Options{})
			if err != nil {
				t.Fatal(err)
			}
			bmcTenants(t, s)
			var acme []string
			address := func(i int) string { return fmt.Sprintf("10.20.%d.%d", i/200, 1+i%200) }
			for i := range MaxPage + 1 {
				n, err := bmcNode(s, "acme", "gpu", i, address(i), false)
				if err != nil {
					t.Fatal(err)
				}
				acme = append(acme, n.ID)
			}
			// The store as an earlier version leaves it: no entry for acme's nodes, and
			// one for a BMC its node no longer binds.
			const left = "rack-a\x0010.20.9.9\x00"
			if removed := clearIndex(t, s, bucketNodesByBMC); removed != len(acme) {
				t.Errorf("%d index entries for %d nodes", removed, len(acme))
			}
			mustUpdate(t, s, func(tx *Tx) error { return tx.putRaw(bucketNodesByBMC, []byte(left+acme[0]), []byte("acme")) })
			err = s.Check()
			if err == nil || strings.Count(err.Error(), "with no nodes_by_bmc entry") != len(acme) ||
				!strings.Contains(err.Error(), `nodes_by_bmc/"`+strings.ReplaceAll(left, "\x00", `\x00`)+acme[0]+`" names a BMC node `+acme[0]+` does not bind`) {
				t.Errorf("Check of the store an earlier version left: %v", err)
			}
			// Opened again, twice: the first open reindexes, the second finds nothing to do.
			for range 2 {
				s.Close()
				if s, err = open(t, Options{}); err != nil {
					t.Fatal(err)
				}
				for j := range acme {
					_, err := bmcNode(s, "beta", "gpu", 300+j, address(j), false)
					refusedBMC(t, "reopened, beta enrolling with acme's BMC "+address(j), err, acme...)
				}
			}
			if _, err := bmcNode(s, "beta", "gpu", 254, "10.20.9.9", false); err != nil {
				t.Errorf("the BMC the left entry named stays taken: %v", err)
			}
			if err := s.Check(); err != nil {
				t.Errorf("the reindexed store: %v", err)
			}
			s.Close()
		})
	}
}
