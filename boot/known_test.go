package boot

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
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

// refusedCounts is an Observer counting the DISCOVERs refused beyond the share of the
// machines not known and those of a range with no free address.
type refusedCounts struct {
	counts
	refused, exhausted int
}

func (c *refusedCounts) DHCPUnknownRefused() { c.refused++ }
func (c *refusedCounts) DHCPPoolExhausted()  { c.exhausted++ }

// TestDiscoverStormWarnsOnceAMinute: as the attacker, a host sends DHCPDISCOVERs under
// ever new MACs, past the share of the machines the site does not know, and a known
// machine asks of a range with no free address. Each refusal is counted, but each kind
// warns once a minute, with how many it stands for and what to do, not once a packet:
// before, each refused DISCOVER wrote a warn line, so a storm of them grew the site's
// log as fast as the host could send.
func TestDiscoverStormWarnsOnceAMinute(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	log := &bytes.Buffer{}
	obs := &refusedCounts{}
	cfg := authoritativeConfig(t, "10.9.0.103") // four addresses, two for machines not known
	known := entries{}
	for i := range 5 {
		known[net.HardwareAddr{0x52, 0x54, 0, 0, 0, byte(1 + i)}.String()] = Entry{Kind: KindDisk}
	}
	s, err := New(cfg, Deps{Entries: known, Clock: clk, Observer: obs, Log: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.DHCPHandler()
	storm := func(from, n int) {
		for i := range n {
			disc, _ := dhcpv4.NewDiscovery(net.HardwareAddr{0x02, 0x66, 0, 0, byte((from + i) >> 8), byte(from + i)})
			h(disc)
		}
	}
	const refused = "machines the site does not know hold their share"
	storm(0, 200)
	if n := strings.Count(log.String(), refused); n != 1 || !strings.Contains(log.String(), "discovers=1\n") || !strings.Contains(log.String(), "boot.unknownShare") {
		t.Errorf("%d warns of 198 DISCOVERs refused within a minute, want 1 of discovers=1 naming boot.unknownShare:\n%s", n, log)
	}
	clk.Advance(time.Minute) // the offers ended too: two more MACs are offered the share
	storm(200, 3)
	if n := strings.Count(log.String(), refused); n != 2 || !strings.Contains(log.String(), "discovers=198\n") {
		t.Errorf("%d warns after a minute, want a second one of discovers=198 (the 197 held back and its own):\n%s", n, log)
	}
	if obs.refused != 199 {
		t.Errorf("counted %d refused, want 199", obs.refused)
	}

	// Four known machines take the four addresses, two of them from the machines not
	// known; the fifth asks three times of a range full of known machines' offers.
	for i := range 7 {
		disc, _ := dhcpv4.NewDiscovery(net.HardwareAddr{0x52, 0x54, 0, 0, 0, byte(1 + min(i, 4))})
		h(disc)
	}
	const exhausted = "their subnet's range has no free address"
	if n := strings.Count(log.String(), exhausted); obs.exhausted != 3 || n != 1 || !strings.Contains(log.String(), "boot.range") {
		t.Errorf("%d warns of %d DISCOVERs of a full range, want 1 naming boot.range, of 3 counted:\n%s", n, obs.exhausted, log)
	}
}
