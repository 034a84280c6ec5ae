package site

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// openStore opens a store holding tenant acme, site rack-a and acme's pool gpu there.
func openStore(t testing.TB) *store.Store { return storetest.Filled(t, store.Options{}) }

func TestRefreshMovesGenerationOnChangeOnly(t *testing.T) {
	st := openStore(t)
	entry := proto.BootEntry{Node: "gpu-01", MACs: []string{"52:54:00:00:00:01"}, Kind: proto.BootDisk}
	var gens []int64
	for range 2 {
		err := st.Update(func(tx *store.Tx) error {
			spec, err := Refresh(tx, "rack-a", nil, "")
			gens = append(gens, spec.Generation)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// A standing boot entry written beside the cache plan is kept by the next refresh.
	err := st.Update(func(tx *store.Tx) error {
		spec, err := tx.NodeSpec("rack-a")
		if err != nil {
			return err
		}
		spec.Site.BootEntries = []proto.BootEntry{entry}
		if _, err := tx.SetNodeSpec(spec); err != nil {
			return err
		}
		spec, err = Refresh(tx, "rack-a", nil, "")
		gens = append(gens, spec.Generation)
		if len(spec.Site.BootEntries) != 1 {
			t.Errorf("refresh dropped the standing entries: %+v", spec.Site)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if gens[0] != 1 || gens[1] != 1 || gens[2] != 2 {
		t.Fatalf("generations %v, want [1 1 2]", gens)
	}
}

func TestDiscoveryProposesMAC(t *testing.T) {
	st := openStore(t)
	var node store.Node
	err := st.Update(func(tx *store.Tx) (err error) {
		node, err = tx.CreateNode(store.Node{Tenant: "acme", Pool: "gpu", ProductUUID: "12345678-9abc-def0-1122-334455667788"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Store: st, Log: slog.New(slog.DiscardHandler)})
	seen := time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)
	send := func(agent, uuid, mac string) {
		data, _ := json.Marshal([]proto.Discovery{{MAC: mac, ProductUUID: uuid, FirstSeen: seen, LastSeen: seen}})
		s.discoveries(report{agent, data})
	}
	send("rack-b", "12345678-9abc-def0-1122-334455667788", "52:54:00:00:00:09") // another site's agent
	send("rack-a", "78563412-bc9a-f0de-1122-334455667788", "52:54:00:00:00:07") // the other spelling
	err = st.View(func(tx *store.Tx) (err error) { node, err = tx.Node(node.ID); return err })
	if err != nil {
		t.Fatal(err)
	}
	want := store.MACProposal{MAC: "52:54:00:00:00:07", Site: "rack-a", SeenAt: seen}
	if node.MACProposal == nil || *node.MACProposal != want {
		t.Fatalf("proposal %+v, want %+v", node.MACProposal, want)
	}
}

// TestDiscoveryBindsOnATrustedNetwork: on a pool with policy.trustProvisioningNetwork
// the proposed MAC is bound at once (the node's MAC and boundMac); on another pool it
// stays a proposal, and a MAC another node holds, or one the machine's BMC does not list
// among its NICs, is never bound.
func TestDiscoveryBindsOnATrustedNetwork(t *testing.T) {
	st := openStore(t)
	const uuidA, uuidB, uuidC, uuidD = "12345678-9abc-def0-1122-334455667788", "22345678-9abc-def0-1122-334455667788", "32345678-9abc-def0-1122-334455667788", "42345678-9abc-def0-1122-334455667788"
	var trusted, plain, taken, listed store.Node
	err := st.Update(func(tx *store.Tx) (err error) {
		if _, err = tx.CreatePool(store.Pool{Tenant: "acme", Name: "trusted", Site: "rack-a", Policy: store.PoolPolicy{TrustProvisioningNetwork: true}}); err != nil {
			return err
		}
		if trusted, err = tx.CreateNode(store.Node{Tenant: "acme", Pool: "trusted", ProductUUID: uuidA}); err != nil {
			return err
		}
		if taken, err = tx.CreateNode(store.Node{Tenant: "acme", Pool: "trusted", ProductUUID: uuidC}); err != nil {
			return err
		}
		if listed, err = tx.CreateNode(store.Node{Tenant: "acme", Pool: "trusted", ProductUUID: uuidD, BMCMACs: []string{"52:54:00:00:00:05"}}); err != nil {
			return err
		}
		if _, err = tx.CreateNode(store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:03"}}); err != nil {
			return err
		}
		plain, err = tx.CreateNode(store.Node{Tenant: "acme", Pool: "gpu", ProductUUID: uuidB})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Store: st, Log: slog.New(slog.DiscardHandler)})
	seen := time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)
	data, _ := json.Marshal([]proto.Discovery{
		{MAC: "52:54:00:00:00:01", ProductUUID: uuidA, FirstSeen: seen, LastSeen: seen},
		{MAC: "52:54:00:00:00:02", ProductUUID: uuidB, FirstSeen: seen, LastSeen: seen},
		{MAC: "52:54:00:00:00:03", ProductUUID: uuidC, FirstSeen: seen, LastSeen: seen},
		{MAC: "52:54:00:00:00:04", ProductUUID: uuidD, FirstSeen: seen, LastSeen: seen},
	})
	s.discoveries(report{"rack-a", data})
	st.View(func(tx *store.Tx) error {
		trusted, _ = tx.Node(trusted.ID)
		plain, _ = tx.Node(plain.ID)
		taken, _ = tx.Node(taken.ID)
		listed, _ = tx.Node(listed.ID)
		return nil
	})
	if trusted.BoundMAC != "52:54:00:00:00:01" || len(trusted.MACs) != 1 || trusted.MACs[0] != trusted.BoundMAC || trusted.MACProposal != nil {
		t.Errorf("the trusted pool's node: macs %v, bound %q, proposal %+v", trusted.MACs, trusted.BoundMAC, trusted.MACProposal)
	}
	if plain.BoundMAC != "" || len(plain.MACs) != 0 || plain.MACProposal == nil {
		t.Errorf("the other pool's node: macs %v, bound %q, proposal %+v", plain.MACs, plain.BoundMAC, plain.MACProposal)
	}
	if taken.BoundMAC != "" || len(taken.MACs) != 0 {
		t.Errorf("a MAC another node holds was bound: macs %v", taken.MACs)
	}
	if listed.BoundMAC != "" || len(listed.MACs) != 0 || listed.MACProposal == nil {
		t.Errorf("a MAC the BMC does not list was bound: macs %v, proposal %+v", listed.MACs, listed.MACProposal)
	}
}

// TestStoreWritesRecomputePlans checks that the site agents' NodeSpecs follow the store,
// not the API: a write made straight through the store (as a workflow or any renamed
// method makes it) recomputes them long before the periodic recomputation.
func TestStoreWritesRecomputePlans(t *testing.T) {
	st := openStore(t)
	specs := make(chan proto.NodeSpec, 16)
	defer st.OnNodeSpec(func(node string, _ int64) {
		st.View(func(tx *store.Tx) error {
			spec, err := tx.NodeSpec(node)
			specs <- spec
			return err
		})
	})()
	s := New(Config{Store: st, Interval: time.Hour, Log: slog.New(slog.DiscardHandler)})
	go s.Run(t.Context())
	next := func(what string) proto.NodeSpec {
		t.Helper()
		select {
		case spec := <-specs:
			return spec
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the site agent's NodeSpec was not recomputed", what)
			return proto.NodeSpec{}
		}
	}
	if spec := next("start"); spec.Generation != 1 {
		t.Fatalf("first NodeSpec: %+v", spec)
	}
	err := st.Update(func(tx *store.Tx) error {
		_, err := tx.SetSiteImageSources("rack-a", []string{"images.example"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	spec := next("a site written through the store")
	if spec.Generation != 2 || len(spec.Site.ImageSources) != 1 {
		t.Fatalf("after the write: %+v", spec)
	}
}
