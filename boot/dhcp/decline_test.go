package dhcp

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot/lease"
	"github.com/better-compute/better-compute/clock"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestDeclineOfALeaseInUseIsAnotherHosts is a host on the segment that saw a machine's
// MAC and address in its broadcasts, and sends a DHCPDECLINE in the machine's name ten
// minutes after the machine was leased the address. A client declines only the address
// it was just given, before it uses it: before the rule, the server held the address
// away, and the machine's next renewal got a DHCPNAK, so that it lost its address while
// it deployed. Now the decline is ignored and the renewal acknowledged; a decline
// right after the DHCPACK still holds the address away.
func TestDeclineOfALeaseInUseIsAnotherHosts(t *testing.T) {
	s, store := newAuthoritative(t)
	clk := clock.NewFake(time.Unix(1e9, 0))
	pool, err := lease.NewPool(store, lease.Range{Start: netip.MustParseAddr("10.9.0.100"), End: netip.MustParseAddr("10.9.0.101")}, nil, time.Hour, clk, lease.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	s.Subnets[0].Pool = pool // on a clock the test moves
	leased := func(mac net.HardwareAddr) net.IP {
		t.Helper()
		offer, ok := s.Handle(discover(t, mac))
		if !ok {
			t.Fatalf("no offer to %s", mac)
		}
		req, _ := dhcpv4.NewRequestFromOffer(offer)
		if ack, ok := s.Handle(req); !ok || ack.MessageType() != dhcpv4.MessageTypeAck {
			t.Fatalf("no DHCPACK of %s to %s", offer.YourIPAddr, mac)
		}
		return offer.YourIPAddr
	}
	decline := func(mac net.HardwareAddr, ip net.IP) {
		d, _ := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline), dhcpv4.WithHwAddr(mac),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverIP)))
		s.Handle(d)
	}
	renew := func(mac net.HardwareAddr, ip net.IP) *dhcpv4.DHCPv4 {
		r, _ := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithHwAddr(mac), dhcpv4.WithClientIP(ip))
		resp, _ := s.Handle(r)
		return resp
	}

	ip := leased(mac)
	clk.Advance(10 * time.Minute)
	decline(mac, ip) // the other host's, in the machine's name
	if resp := renew(mac, ip); resp == nil || resp.MessageType() != dhcpv4.MessageTypeAck || !resp.YourIPAddr.Equal(ip) {
		t.Errorf("the machine's renewal of %s after another host declined it: %v, want a DHCPACK of it", ip, resp)
	}

	other := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 7}
	ip = leased(other)
	clk.Advance(5 * time.Second) // the client's ARP check found another host there
	decline(other, ip)
	if resp := renew(other, ip); resp == nil || resp.MessageType() != dhcpv4.MessageTypeNak {
		t.Errorf("a renewal of %s declined right after its DHCPACK: %v, want a DHCPNAK (held away)", ip, resp)
	}
}
