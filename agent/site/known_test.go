package site

import (
	"context"
	"net"
	"testing"

	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/proto"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestEnrolledMACsAreKnown: a machine the NodeSpec's knownMacs lists, with no boot entry
// (installed, or enrolled and waiting), is a known client of the site's DHCP: once a
// spoofer's MACs hold the share of the range left to clients not known, its
// DHCPDISCOVER is still offered an address, while another MAC's is not. Before the
// NodeSpec lists it, it is refused like any stranger.
func TestEnrolledMACsAreKnown(t *testing.T) {
	a, srv := openSite(t, Config{HTTPBase: "http://10.0.0.1"}, boot.Authoritative) // 4 addresses, half for strangers
	const enrolled = "52:54:00:00:00:05"
	offered := func(mac string) bool {
		t.Helper()
		hw, _ := net.ParseMAC(mac)
		disc, err := dhcpv4.NewDiscovery(hw)
		if err != nil {
			t.Fatal(err)
		}
		resp, ok := srv.DHCPHandler()(disc)
		return ok && resp.MessageType() == dhcpv4.MessageTypeOffer
	}
	for _, spoofed := range []string{"02:00:00:00:00:01", "02:00:00:00:00:02"} {
		if !offered(spoofed) {
			t.Fatalf("the spoofer's %s got no offer within the strangers' share", spoofed)
		}
	}
	if offered("02:00:00:00:00:03") || offered(enrolled) {
		t.Fatal("a stranger got an offer past the strangers' share")
	}
	err := a.apply(context.Background(), proto.NodeSpec{Node: "rack-a", Role: proto.RoleSite,
		Site: &proto.SiteSpec{KnownMACs: []string{"52:54:00:00:00:01", enrolled}}})
	if err != nil {
		t.Fatal(err)
	}
	if !offered(enrolled) {
		t.Error("the machine knownMacs lists got no offer once the spoofer held the strangers' share")
	}
	if offered("02:00:00:00:00:04") {
		t.Error("a MAC knownMacs does not list got an offer past the strangers' share")
	}
}

// TestEntriesHas: Has answers as Entry does, standing and relayed entries alike, and
// follows their changes.
func TestEntriesHas(t *testing.T) {
	es, err := openEntries(t.TempDir()+"/entries.json", RamdiskConfig{}, "http://10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	standing, relayed, stranger := "52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03"
	es.setStanding([]proto.BootEntry{{Node: "nd_1", MACs: []string{standing}, Kind: proto.BootDisk}})
	if err := es.setRelayed("nd_2", &proto.BootEntry{Node: "nd_2", MACs: []string{relayed}, Kind: proto.BootDisk}); err != nil {
		t.Fatal(err)
	}
	check := func(when string, want map[string]bool) {
		t.Helper()
		for mac, w := range want {
			hw, _ := net.ParseMAC(mac)
			_, entry := es.Entry(hw)
			if got := es.Has(hw); got != w || entry != w {
				t.Errorf("%s: Has(%s) %v, Entry's ok %v; want %v", when, mac, got, entry, w)
			}
		}
	}
	check("both set", map[string]bool{standing: true, relayed: true, stranger: false})
	if err := es.setRelayed("nd_2", nil); err != nil {
		t.Fatal(err)
	}
	es.setStanding(nil)
	check("both removed", map[string]bool{standing: false, relayed: false, stranger: false})
}
