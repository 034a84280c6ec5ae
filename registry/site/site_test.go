package site

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

func openStore(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	err = st.Update(func(tx *store.Tx) error {
		if _, err := tx.CreateTenant("acme"); err != nil {
			return err
		}
		if _, err := tx.CreateSite("rack-a"); err != nil {
			return err
		}
		_, err := tx.CreatePool(store.Pool{Tenant: "acme", Name: "gpu", Site: "rack-a"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestRefreshMovesGenerationOnChangeOnly(t *testing.T) {
	st := openStore(t)
	entry := proto.BootEntry{Node: "gpu-01", MACs: []string{"52:54:00:00:00:01"}, Kind: proto.BootDisk}
	var gens []int64
	for range 2 {
		err := st.Update(func(tx *store.Tx) error {
			spec, err := Refresh(tx, "rack-a", nil)
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
		spec, err = Refresh(tx, "rack-a", nil)
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
