package dhcp

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"

	"github.com/better-compute/better-compute/boot/lease"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Authoritative is the DHCP server of a range: it leases addresses from Pool and adds
// boot information for network-boot clients.
type Authoritative struct {
	// ServerIP is this server's address (option 54, and the default router's absence).
	ServerIP net.IP
	Pool     *lease.Pool
	// Mask is the subnet mask (option 1).
	Mask net.IPMask
	// Router (option 3) and DNS (option 6) are left out when empty.
	Router net.IP
	DNS    []net.IP
	Boot   Boot
	// Seen is told of every network-boot client that asks; nil for none.
	Seen func(Client)
	Log  *slog.Logger
}

// Handle answers one request. A DHCPREQUEST is acknowledged only once its lease is on
// disk, so Handle may wait for the lease file's next commit.
func (s Authoritative) Handle(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool) {
	c, ok := Classify(req)
	if !ok {
		return nil, false
	}
	mac := c.MAC.String()
	if c.Netboot() && s.Seen != nil {
		switch req.MessageType() {
		case dhcpv4.MessageTypeDiscover, dhcpv4.MessageTypeRequest:
			s.Seen(c)
		}
	}
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		ip, err := s.Pool.Offer(mac, addr(req.RequestedIPAddress()))
		if err != nil {
			s.Log.Warn("no address to offer", "mac", mac, "err", err)
			return nil, false
		}
		return s.answer(req, c, dhcpv4.MessageTypeOffer, ip)
	case dhcpv4.MessageTypeRequest:
		if id := req.ServerIdentifier(); id != nil && !id.Equal(s.ServerIP) {
			return nil, false // the client chose another server's offer
		}
		ip := addr(req.RequestedIPAddress())
		if !ip.IsValid() {
			ip = addr(req.ClientIPAddr)
		}
		if !ip.IsValid() {
			return nil, false
		}
		if _, err := s.Pool.Ack(mac, ip); err != nil {
			if errors.Is(err, lease.ErrNotYours) {
				return s.nak(req)
			}
			s.Log.Error("lease not stored: no DHCPACK sent", "mac", mac, "ip", ip, "err", err)
			return nil, false
		}
		return s.answer(req, c, dhcpv4.MessageTypeAck, ip)
	case dhcpv4.MessageTypeRelease:
		if err := s.Pool.Release(mac, addr(req.ClientIPAddr)); err != nil && !errors.Is(err, lease.ErrNotYours) {
			s.Log.Error("release not stored", "mac", mac, "err", err)
		}
		return nil, false
	case dhcpv4.MessageTypeDecline:
		if err := s.Pool.Decline(mac, addr(req.RequestedIPAddress())); err != nil && !errors.Is(err, lease.ErrNotYours) {
			s.Log.Error("decline not stored", "mac", mac, "err", err)
		}
		return nil, false
	case dhcpv4.MessageTypeInform:
		return s.answer(req, c, dhcpv4.MessageTypeAck, netip.Addr{})
	}
	return nil, false
}

// answer builds an offer or acknowledgement of ip (none for DHCPINFORM).
func (s Authoritative) answer(req *dhcpv4.DHCPv4, c Client, t dhcpv4.MessageType, ip netip.Addr) (*dhcpv4.DHCPv4, bool) {
	resp, ok := reply(req, t, s.ServerIP)
	if !ok {
		return nil, false
	}
	if ip.IsValid() {
		ttl := s.Pool.TTL()
		resp.YourIPAddr = net.IP(ip.AsSlice())
		resp.UpdateOption(dhcpv4.OptIPAddressLeaseTime(ttl))
		resp.UpdateOption(dhcpv4.OptRenewTimeValue(ttl / 2))
		resp.UpdateOption(dhcpv4.OptRebindingTimeValue(ttl * 7 / 8))
	} else {
		resp.ClientIPAddr = req.ClientIPAddr
	}
	resp.UpdateOption(dhcpv4.OptSubnetMask(s.Mask))
	if s.Router != nil {
		resp.UpdateOption(dhcpv4.OptRouter(s.Router))
	}
	if len(s.DNS) > 0 {
		resp.UpdateOption(dhcpv4.OptDNS(s.DNS...))
	}
	if a, ok := s.Boot.Choose(c); ok {
		addBoot(resp, req, a, s.Boot.TFTPServer)
	}
	return resp, true
}

// nak refuses a DHCPREQUEST for an address the client may not have.
func (s Authoritative) nak(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool) {
	resp, ok := reply(req, dhcpv4.MessageTypeNak, s.ServerIP)
	if !ok {
		return nil, false
	}
	resp.ServerIPAddr = net.IPv4zero
	return resp, true
}

// addr converts a packet's address, the invalid Addr for none or 0.0.0.0.
func addr(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip.To4())
	if !ok || a.IsUnspecified() {
		return netip.Addr{}
	}
	return a
}
