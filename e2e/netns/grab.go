package netns

import (
	"crypto/rand"
	"net"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
)

// GrabSpec is what Grab does: on Interface, take leases under a new random MAC each,
// DHCPDISCOVER then DHCPREQUEST as any client, until Refusals DISCOVERs in a row got no
// offer or Attempts MACs were tried.
type GrabSpec struct {
	Interface string
	Attempts  int
	Refusals  int
}

// Grabbed is what Grab took.
type Grabbed struct {
	Leases []string
	// Refused is how many DISCOVERs got no offer.
	Refused int
}

// Grab is a host that spoofs MACs to take a DHCP server's addresses, as spec says. It
// must run inside the host's namespace (a helper process there, or Do).
func Grab(spec GrabSpec) (Grabbed, error) {
	var got Grabbed
	conn, err := server4.NewIPv4UDPConn(spec.Interface, &net.UDPAddr{Port: dhcpv4.ClientPort})
	if err != nil {
		return got, err
	}
	defer conn.Close()
	server := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}
	// exchange sends m and returns the first reply of its transaction within 2 s.
	exchange := func(m *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, error) {
		if _, err := conn.WriteTo(m.ToBytes(), server); err != nil {
			return nil, err
		}
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 1500)
		for {
			n, _, err := conn.ReadFrom(buf)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			if r, err := dhcpv4.FromBytes(buf[:n]); err == nil && r.OpCode == dhcpv4.OpcodeBootReply && r.TransactionID == m.TransactionID {
				return r, nil
			}
		}
	}
	refusals := 0
	for range spec.Attempts {
		mac := make(net.HardwareAddr, 6)
		rand.Read(mac)
		mac[0] = mac[0]&^1 | 2 // unicast, locally administered
		disc, err := dhcpv4.NewDiscovery(mac, dhcpv4.WithBroadcast(true))
		if err != nil {
			return got, err
		}
		offer, err := exchange(disc)
		if err != nil {
			return got, err
		}
		if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer {
			got.Refused++
			if refusals++; refusals == spec.Refusals {
				return got, nil
			}
			continue
		}
		refusals = 0
		req, err := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithBroadcast(true))
		if err != nil {
			return got, err
		}
		ack, err := exchange(req)
		if err != nil {
			return got, err
		}
		if ack != nil && ack.MessageType() == dhcpv4.MessageTypeAck {
			got.Leases = append(got.Leases, ack.YourIPAddr.String())
		}
	}
	return got, nil
}
