package site

import (
	"encoding/json"
	"log/slog"
	"net"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

const discoveredUUID = "12345678-9abc-def0-1122-334455667788"

// discoveryNode enrolls a node of rack-a by product UUID, without a MAC.
func discoveryNode(t testing.TB, st *store.Store) string {
	var node store.Node
	err := st.Update(func(tx *store.Tx) (err error) {
		node, err = tx.CreateNode(store.Node{Tenant: "acme", Pool: "gpu", ProductUUID: discoveredUUID})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return node.ID
}

func proposal(t testing.TB, st *store.Store, id string) *store.MACProposal {
	var node store.Node
	if err := st.View(func(tx *store.Tx) (err error) { node, err = tx.Node(id); return err }); err != nil {
		t.Fatal(err)
	}
	return node.MACProposal
}

// A site agent's discoveries are its own report: a MAC that is not six bytes (or holds
// what a terminal would act on when `nodes get` shows it) proposes nothing, and another
// spelling of a good one is proposed in the one spelling enrollment keeps.
func TestDiscoveryLeavesOutMalformedMACs(t *testing.T) {
	st := openStore(t)
	id := discoveryNode(t, st)
	s := New(Config{Store: st, Log: slog.New(slog.DiscardHandler)})
	send := func(mac string) {
		data, _ := json.Marshal([]proto.Discovery{{MAC: mac, ProductUUID: discoveredUUID}})
		s.discoveries(report{"rack-a", data})
	}
	for _, mac := range []string{"52:54:00:00:00:0z", "\x1b[2J52:54:00:00:00:07", "00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01", ""} {
		send(mac)
		if p := proposal(t, st, id); p != nil {
			t.Fatalf("%q proposed %+v", mac, p)
		}
	}
	send("52-54-00-AB-00-07")
	if p := proposal(t, st, id); p == nil || p.MAC != "52:54:00:ab:00:07" {
		t.Fatalf("proposal %+v, want 52:54:00:ab:00:07", p)
	}
}

// FuzzDiscoveries records any discoveries section a site agent sends: whatever it
// proposes is a MAC of six bytes in the spelling enrollment keeps, for the agent's site.
func FuzzDiscoveries(f *testing.F) {
	st := openStore(f)
	id := discoveryNode(f, st)
	s := New(Config{Store: st, Log: slog.New(slog.DiscardHandler)})
	f.Add([]byte(`[{"mac":"52:54:00:00:00:07","productUuid":"` + discoveredUUID + `","firstSeen":"2026-11-01T08:00:00Z"}]`))
	f.Add([]byte(`[{"mac":"5254.0000.0007","productUuid":"78563412-BC9A-F0DE-1122-334455667788"}]`))
	f.Add([]byte(`[{"mac":"\u001b[2J","productUuid":"` + discoveredUUID + `"}]`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s.discoveries(report{"rack-a", data})
		p := proposal(t, st, id)
		if p == nil {
			return
		}
		hw, err := net.ParseMAC(p.MAC)
		if err != nil || len(hw) != 6 || hw.String() != p.MAC || p.Site != "rack-a" {
			t.Fatalf("proposal %+v from %q", p, data)
		}
	})
}
