package boot

import (
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// builtEntries counts the entries it builds.
type builtEntries struct {
	entries
	built atomic.Int64
}

func (b *builtEntries) Entry(mac net.HardwareAddr) (Entry, bool) {
	b.built.Add(1)
	return b.entries.Entry(mac)
}

// TestDHCPAsksWhetherItKnowsWithoutBuildingEntries: the authoritative server's exchanges
// with BIOS and iPXE clients, known by an entry or not, build no entry (a ramdisk
// entry's build mints capability URLs): the server asks Entries.Has whether it knows a
// client, and the known one gets the subnet's lease time, the other the short one.
func TestDHCPAsksWhetherItKnowsWithoutBuildingEntries(t *testing.T) {
	cfg := authoritativeConfig(t, "10.9.0.200")
	cfg.LeaseTime, cfg.UnknownLeaseTime = Duration(time.Hour), Duration(10*time.Minute)
	const known = "52:54:00:00:00:01"
	e := &builtEntries{entries: entries{known: {Kind: KindRamdisk, Ramdisk: Ramdisk{Kernel: "vmlinuz", Initrd: "vmlinuz", Token: "rt_acme"}}}}
	s, err := New(cfg, Deps{Entries: e, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		mac  string
		ipxe bool
		ttl  time.Duration
	}{{known, false, time.Hour}, {known, true, time.Hour}, {"52:54:00:00:00:02", false, 10 * time.Minute}, {"52:54:00:00:00:02", true, 10 * time.Minute}} {
		hw, _ := net.ParseMAC(c.mac)
		mods := []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
			dhcpv4.WithOption(dhcpv4.OptClientArch(0))}
		if c.ipxe {
			mods = append(mods, dhcpv4.WithOption(dhcpv4.OptUserClass("iPXE")))
		}
		disc, err := dhcpv4.NewDiscovery(hw, mods...)
		if err != nil {
			t.Fatal(err)
		}
		offer, ok := s.DHCPHandler()(disc)
		if !ok || offer.MessageType() != dhcpv4.MessageTypeOffer {
			t.Fatalf("%s (iPXE %v): no offer", c.mac, c.ipxe)
		}
		req, err := dhcpv4.NewRequestFromOffer(offer, mods...)
		if err != nil {
			t.Fatal(err)
		}
		ack, ok := s.DHCPHandler()(req)
		if !ok || ack.MessageType() != dhcpv4.MessageTypeAck {
			t.Fatalf("%s (iPXE %v): no acknowledgement", c.mac, c.ipxe)
		}
		if got := ack.IPAddressLeaseTime(0); got != c.ttl {
			t.Errorf("%s (iPXE %v): lease of %s, want %s", c.mac, c.ipxe, got, c.ttl)
		}
		if ack.BootFileName == "" {
			t.Errorf("%s (iPXE %v): no boot file", c.mac, c.ipxe)
		}
	}
	if n := e.built.Load(); n != 0 {
		t.Errorf("the exchanges built %d entries, want none", n)
	}
}
