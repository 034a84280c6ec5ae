package boot

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Addresses of the conflict tests: a host holds taken, configured by hand, the first
// address of netConfig's range, which the server would offer first.
const (
	taken      = "10.99.0.100"
	takenAsker = "02:00:00:00:03:01"
)

// conflictNet is the test network with a host at taken; its boot server checks
// addresses from a datagram ICMP socket when datagram is set (net.ipv4.ping_group_range
// admitting root's group in its namespace), else from a raw one.
func conflictNet(t *testing.T, datagram bool) testNet {
	t.Helper()
	n := newTestNet(t, "busybox")
	host := netns.New(t, "host")
	n.lan.Attach(t, host, "bch0", taken+"/24", "")
	if datagram {
		n.server.Run(t, "sh", "-c", "echo '0 0' > /proc/sys/net/ipv4/ping_group_range")
	}
	return n
}

// conflictLogged reports whether log names the conflict at taken with the MAC that would
// have got it.
func conflictLogged(log string) bool {
	return strings.Contains(log, "a host answers at this address inside the DHCP range") && strings.Contains(log, "ip="+taken+" mac="+takenAsker)
}

// TestAddressInUseIsNotLeased: beside a host at taken, busybox udhcpc, a real DHCP
// client, is leased another address, and the server's log names the conflict: the
// address and the MAC that would have got it; checked from a raw ICMP socket (root) and
// from a datagram one. Before the check, the client was leased the host's address.
func TestAddressInUseIsNotLeased(t *testing.T) {
	for _, socket := range []string{"raw", "datagram"} {
		t.Run(socket, func(t *testing.T) {
			n := conflictNet(t, socket == "datagram")
			srv := startServer(t, n.server, netConfig(t, Authoritative), nil)
			if ip := udhcpc(t, n, takenAsker)["ip"]; ip == "" || ip == taken {
				t.Errorf("udhcpc leased %q beside a host at %s, want another address", ip, taken)
			}
			log := srv.log.String()
			if !conflictLogged(log) {
				t.Error("the conflict is not in the server's log")
			}
			if !strings.Contains(log, "socket="+socket) {
				t.Errorf("no checks from a %s socket in the log", socket)
			}
		})
	}
}

// TestConflictCheckOff: with conflictCheck false the client is leased the host's
// address, as every client was before the check, and nothing is logged of it.
func TestConflictCheckOff(t *testing.T) {
	n := conflictNet(t, false)
	cfg := netConfig(t, Authoritative)
	cfg.ConflictCheck = new(false)
	srv := startServer(t, n.server, cfg, nil)
	if ip := udhcpc(t, n, takenAsker)["ip"]; ip != taken {
		t.Errorf("udhcpc leased %q with the check off, want %s", ip, taken)
	}
	if conflictLogged(srv.log.String()) {
		t.Error("a conflict logged with the check off")
	}
}

// TestHostAnsweringEverywhereLeavesAddresses: a host on the segment holds every address
// of a range of ten by `ip addr add`, so it answers the check's echo at each; busybox
// udhcpc, a real DHCP client, is still leased an address, and the server warns that the
// addresses held away take their share. Before the bound, every address was held away
// for a lease time within four DISCOVERs, and udhcpc got none.
func TestHostAnsweringEverywhereLeavesAddresses(t *testing.T) {
	n := newTestNet(t, "busybox")
	host := netns.New(t, "host")
	n.lan.Attach(t, host, "bch0", "10.99.0.100/24", "")
	for i := 101; i <= 109; i++ {
		host.Run(t, "ip", "addr", "add", fmt.Sprintf("10.99.0.%d/24", i), "dev", "bch0")
	}
	cfg := netConfig(t, Authoritative)
	cfg.Range.End = netip.MustParseAddr("10.99.0.109")
	srv := startServer(t, n.server, cfg, nil)
	if ip := udhcpc(t, n, takenAsker)["ip"]; ip == "" {
		t.Error("udhcpc leased nothing beside a host answering at every address of the range")
	}
	if log := srv.log.String(); !strings.Contains(log, "the addresses held away as in use take their share of a range") {
		t.Errorf("no warn of the share in the server's log:\n%s", log)
	}
}

// TestDecliningEveryOfferLeavesAddresses: a host takes every address it is offered under
// ever new MACs and declines it at once, as a client that found it in use would; on a
// range of sixteen it has two held away (an eighth, the default), and a machine is then
// still offered an address. The server warns of it once a minute. Before the bound, the
// host had the whole range held away for a lease time, and the machine got no offer.
func TestDecliningEveryOfferLeavesAddresses(t *testing.T) {
	cfg := authoritativeConfig(t, "10.9.0.115")
	clk := clock.NewFake(time.Unix(1e9, 0))
	log := &bytes.Buffer{}
	s, err := New(cfg, Deps{Entries: entries{}, Clock: clk, Log: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.DHCPHandler()
	decline := func(i int) bool {
		hw := net.HardwareAddr{0x02, 0, 0, 0, 0x0d, byte(i)}
		disc, _ := dhcpv4.NewDiscovery(hw)
		offer, ok := h(disc)
		if !ok {
			return false
		}
		req, _ := dhcpv4.NewRequestFromOffer(offer)
		if ack, ok := h(req); !ok || ack.MessageType() != dhcpv4.MessageTypeAck {
			return false
		}
		decl, _ := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline), dhcpv4.WithHwAddr(hw),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(offer.ServerIPAddr)))
		h(decl)
		return true
	}
	for i := range 48 {
		if !decline(i) {
			break
		}
	}
	machine, _ := net.ParseMAC("52:54:00:00:0d:01")
	disc, _ := dhcpv4.NewDiscovery(machine)
	if offer, ok := h(disc); !ok || offer.MessageType() != dhcpv4.MessageTypeOffer {
		t.Fatalf("no offer to a machine beside a host declining every offer: %v", offer)
	}
	const warn = "the addresses held away as in use take their share of a range"
	if n := strings.Count(log.String(), warn); n != 1 {
		t.Errorf("%d warns of the share within a minute, want 1:\n%s", n, log)
	}
	clk.Advance(time.Minute)
	decline(100)
	if n := strings.Count(log.String(), warn); n != 2 {
		t.Errorf("%d warns of the share after a minute, want 2", n)
	}
}
