package dhcp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/better-compute/better-compute/boot/inuse"
	"github.com/better-compute/better-compute/boot/lease"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Subnet is a network the authoritative server leases addresses in.
type Subnet struct {
	// Prefix is the network; its mask is option 1.
	Prefix netip.Prefix
	Pool   *lease.Pool
	// Router (option 3) and DNS (option 6) are left out when empty.
	Router net.IP
	DNS    []net.IP
	// Local marks the server's own segment: the requests that come without a relay
	// agent and without a client address are answered from it.
	Local bool
}

// Authoritative is the DHCP server of its subnets: it leases addresses from their pools
// and adds boot information for network-boot clients.
type Authoritative struct {
	// ServerIP is this server's address (option 54 and siaddr).
	ServerIP net.IP
	// Subnets are the local subnet, if any, and the routed ones; they do not overlap.
	Subnets []Subnet
	Boot    Boot
	// Seen is told of every network-boot client that asks; nil for none.
	Seen func(Client)
	// Exhausted is told of a DHCPDISCOVER left unanswered because its subnet's range has
	// no free address; it warns of it. nil warns of each such DISCOVER.
	Exhausted func()
	// Refused is told of a DHCPDISCOVER of a client the site does not know left
	// unanswered because such clients hold their share of its subnet's range
	// (lease.Policy); it warns of it. nil warns of each such DISCOVER. A host may send
	// DHCPDISCOVERs under any number of MACs, each one refused.
	Refused func()
	// InUse reports whether a host answers at an address (inuse.Checker), an error when
	// its check did not run: an address no lease accounts for is offered only when a check
	// found none does. nil checks nothing.
	InUse func(ip netip.Addr) (bool, error)
	// AddressInUse is told of an address found in use, which the pool then holds away;
	// nil for none.
	AddressInUse func()
	// CheckUnsent is told of a DHCPDISCOVER left unanswered because the check of the
	// address it would be offered did not run (inuse.ErrNotSent), with why; it warns
	// of it. nil warns of each such DISCOVER.
	CheckUnsent func(err error)
	// AwayShare is told of an address offered without its check, or found in use or
	// declined and not held away, because the addresses held away take their share of
	// the subnet's range (lease.Policy.AwayShare); nil for none.
	AwayShare func()
	Log       *slog.Logger
}

// maxChecks bounds the addresses checked for one DHCPDISCOVER: each check that gets no
// answer waits inuse.Echo's wait, and firmware sends its DISCOVER again after 4 s (PXE
// 2.1), so three checks of 500 ms still answer its first one. When all three answer, the
// DISCOVER is not answered; its retransmission is checked from the next address on,
// the three held away.
const maxChecks = 3

// errChecksSpent: the maxChecks addresses checked for a DHCPDISCOVER were all in use.
var errChecksSpent = errors.New("dhcp: a host answered at every address checked for this request")

// subnet is the subnet a request is answered from (RFC 2131 section 4.3.1), nil for
// none: a relayed request's is the subnet of its link, a request from a client that has
// an address (a renewal sent straight to the server) the subnet of that address, any
// other the local subnet.
func (s Authoritative) subnet(req *dhcpv4.DHCPv4) *Subnet {
	var at netip.Addr
	switch {
	case addr(req.GatewayIPAddr).IsValid():
		at = link(req)
	case addr(req.ClientIPAddr).IsValid():
		at = addr(req.ClientIPAddr)
	}
	for i := range s.Subnets {
		sub := &s.Subnets[i]
		if at.IsValid() && sub.Prefix.Contains(at) || !at.IsValid() && sub.Local {
			return sub
		}
	}
	return nil
}

// link is the address of the link a relayed request came from: the link selection
// sub-option of option 82 (RFC 3527), else the subnet selection option 118 (RFC 3011),
// else giaddr. Both options count only in a relayed request.
func link(req *dhcpv4.DHCPv4) netip.Addr {
	if rai := req.RelayAgentInfo(); rai != nil {
		if a := addr(net.IP(rai.Get(dhcpv4.LinkSelectionSubOption))); a.IsValid() {
			return a
		}
	}
	if a := addr(net.IP(req.GetOneOption(dhcpv4.OptionSubnetSelection))); a.IsValid() {
		return a
	}
	return addr(req.GatewayIPAddr)
}

// Handle answers one request. A DHCPREQUEST is acknowledged only once its lease is on
// disk, so Handle may wait for the lease file's next commit. A request of no subnet of
// the server's (relayed from a link it does not serve) is not answered.
func (s Authoritative) Handle(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool) {
	c, ok := Classify(req)
	if !ok {
		return nil, false
	}
	sub := s.subnet(req)
	if sub == nil {
		s.Log.Debug("dhcp request of no subnet served here", "mac", c.MAC.String(), "giaddr", req.GatewayIPAddr.String(), "ciaddr", req.ClientIPAddr.String())
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
		l, err := s.offer(sub, mac, addr(req.RequestedIPAddress()))
		if err != nil {
			// The refusals a storm of DISCOVERs brings are told, and warned of by those
			// told; any other warns here.
			var tell func()
			switch {
			case errors.Is(err, inuse.ErrNotSent) && s.CheckUnsent != nil:
				tell = func() { s.CheckUnsent(err) }
			case errors.Is(err, lease.ErrExhausted) && s.Exhausted != nil:
				tell = s.Exhausted
			case errors.Is(err, lease.ErrUnknownShare) && s.Refused != nil:
				tell = s.Refused
			}
			if tell == nil {
				s.Log.Warn("no address to offer", "mac", mac, "err", err)
				return nil, false
			}
			s.Log.Debug("no address to offer", "mac", mac, "err", err)
			tell()
			return nil, false
		}
		return s.answer(req, c, sub, dhcpv4.MessageTypeOffer, l)
	case dhcpv4.MessageTypeRequest:
		return s.request(req, c, sub)
	case dhcpv4.MessageTypeRelease:
		if err := sub.Pool.Release(mac, addr(req.ClientIPAddr)); err != nil && !errors.Is(err, lease.ErrNotYours) {
			s.Log.Error("release not stored", "mac", mac, "err", err)
		}
		return nil, false
	case dhcpv4.MessageTypeDecline:
		switch err := sub.Pool.Decline(mac, addr(req.RequestedIPAddress())); {
		case errors.Is(err, lease.ErrAwayShare):
			s.awayShare()
		case err != nil && !errors.Is(err, lease.ErrNotYours):
			s.Log.Error("decline not stored", "mac", mac, "err", err)
		}
		return nil, false
	case dhcpv4.MessageTypeInform:
		return s.answer(req, c, sub, dhcpv4.MessageTypeAck, lease.Lease{})
	}
	return nil, false
}

// claim is the address a DHCPREQUEST asks for and how, by the client's state (RFC 2131
// section 4.3.2): option 50 with option 54 is SELECTING, option 50 alone INIT-REBOOT,
// ciaddr without option 50 RENEWING or REBINDING. ok is false for a request of none,
// with neither address.
func claim(req *dhcpv4.DHCPv4) (ip netip.Addr, c lease.Claim, ok bool) {
	switch requested := addr(req.RequestedIPAddress()); {
	case requested.IsValid() && req.ServerIdentifier() != nil:
		return requested, lease.Selecting, true
	case requested.IsValid():
		return requested, lease.Rebooting, true
	}
	ip = addr(req.ClientIPAddr)
	return ip, lease.Renewing, ip.IsValid()
}

// request answers a DHCPREQUEST by its state (claim). One that selects another
// server's offer is not answered. The address is acknowledged when the pool gives it
// (Pool.Ack): a DHCPNAK when it may not (another client's, not the one offered, or
// another than the client's lease), silence for an INIT-REBOOT the pool has no record
// of, as another server may hold the client's lease. An INIT-REBOOT for an address off
// the subnet's network gets a DHCPNAK: the client moved to another network.
func (s Authoritative) request(req *dhcpv4.DHCPv4, c Client, sub *Subnet) (*dhcpv4.DHCPv4, bool) {
	if id := req.ServerIdentifier(); id != nil && !id.Equal(s.ServerIP) {
		return nil, false // the client chose another server's offer
	}
	ip, state, ok := claim(req)
	if !ok {
		return nil, false
	}
	if state == lease.Rebooting && !sub.Prefix.Contains(ip) {
		return s.nak(req)
	}
	mac := c.MAC.String()
	l, err := sub.Pool.Ack(mac, ip, state)
	switch {
	case errors.Is(err, lease.ErrNoRecord):
		s.Log.Debug("INIT-REBOOT of a client with no lease or offer here: not answered", "mac", mac, "ip", ip)
		return nil, false
	case errors.Is(err, lease.ErrNotYours) || errors.Is(err, lease.ErrUnknownShare):
		return s.nak(req)
	case err != nil:
		s.Log.Error("lease not stored: no DHCPACK sent", "mac", mac, "ip", ip, "err", err)
		return nil, false
	}
	s.Log.Debug("lease acknowledged", "mac", mac, "ip", ip)
	return s.answer(req, c, sub, dhcpv4.MessageTypeAck, l)
}

// offer is sub's offer of an address to mac, checked with InUse when no lease accounts
// for it (Pool.Unleased): a host answering at it, configured by hand inside the range, is
// logged and counted, the address is held away as a declined one, and the next address is
// offered, up to maxChecks. A check that did not run (its echo not sent) offers nothing:
// the address stays offered to mac, and its retransmitted DISCOVER checks it again. A
// retransmission of mac's DISCOVER while a check runs is
// offered the same address (its offer), whose check it waits for and shares. While the
// addresses held away take their share of the range (Pool.AwayFull), the address is
// offered unchecked: a host answering at every address, or declining every offer, would
// otherwise leave booting machines none until the holds end.
func (s Authoritative) offer(sub *Subnet, mac string, requested netip.Addr) (lease.Lease, error) {
	l, err := sub.Pool.Offer(mac, requested)
	for range maxChecks {
		if err != nil || s.InUse == nil || !sub.Pool.Unleased(mac, l.IP) {
			return l, err
		}
		if sub.Pool.AwayFull() {
			s.awayShare()
			return l, nil
		}
		inUse, cerr := s.InUse(l.IP)
		if cerr != nil {
			return lease.Lease{}, fmt.Errorf("dhcp: %s was not checked, so it is not offered; the client's next DHCPDISCOVER checks it again. "+
				"Why and what to do: %s: %w", l.IP, inuse.NotSentRemedy(cerr), cerr)
		}
		if !inUse {
			return l, nil
		}
		switch err := sub.Pool.InUse(mac, l.IP); {
		case errors.Is(err, lease.ErrAwayShare):
			s.awayShare() // another request filled the share during the check: skipped, not held
		case errors.Is(err, lease.ErrNotYours):
			// Another request of mac's found it in use first, and told of it.
		default:
			s.Log.Warn("a host answers at this address inside the DHCP range: move the host out of the range, or leave its address out of "+
				"the range (boot.range, boot.subnets[].range); the address is held away for one lease time and the client offered another",
				"ip", l.IP.String(), "mac", mac)
			if s.AddressInUse != nil {
				s.AddressInUse()
			}
			if err != nil { // held away here all the same, until the server stops
				s.Log.Error("address held away not stored", "ip", l.IP.String(), "mac", mac, "err", err)
			}
		}
		l, err = sub.Pool.Offer(mac, netip.Addr{})
	}
	if err != nil {
		return l, err
	}
	return lease.Lease{}, errChecksSpent
}

// awayShare tells AwayShare, if set.
func (s Authoritative) awayShare() {
	if s.AwayShare != nil {
		s.AwayShare()
	}
}

// answer builds an offer or acknowledgement of l (none for DHCPINFORM).
func (s Authoritative) answer(req *dhcpv4.DHCPv4, c Client, sub *Subnet, t dhcpv4.MessageType, l lease.Lease) (*dhcpv4.DHCPv4, bool) {
	resp := reply(req, t, s.ServerIP)
	if l.IP.IsValid() {
		ttl := sub.Pool.TTL(l.Known)
		resp.YourIPAddr = net.IP(l.IP.AsSlice())
		resp.UpdateOption(dhcpv4.OptIPAddressLeaseTime(ttl))
		resp.UpdateOption(dhcpv4.OptRenewTimeValue(ttl / 2))
		resp.UpdateOption(dhcpv4.OptRebindingTimeValue(ttl * 7 / 8))
	} else {
		resp.ClientIPAddr = req.ClientIPAddr
	}
	resp.UpdateOption(dhcpv4.OptSubnetMask(net.CIDRMask(sub.Prefix.Bits(), 32)))
	if sub.Router != nil {
		resp.UpdateOption(dhcpv4.OptRouter(sub.Router))
	}
	if len(sub.DNS) > 0 {
		resp.UpdateOption(dhcpv4.OptDNS(sub.DNS...))
	}
	if a, ok := s.Boot.Choose(c); ok {
		addBoot(resp, req, a, s.Boot.TFTPServer)
	}
	return resp, true
}

// nak refuses a DHCPREQUEST for an address the client may not have.
func (s Authoritative) nak(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool) {
	resp := reply(req, dhcpv4.MessageTypeNak, s.ServerIP)
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
