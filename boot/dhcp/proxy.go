package dhcp

import (
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Proxy is a proxyDHCP server: beside another DHCP server that hands out addresses, it
// answers network-boot clients with boot information only (no address), on port 67 to
// their DHCPDISCOVER and on port 4011 to the DHCPREQUEST some firmware sends it after.
type Proxy struct {
	// ServerIP is this server's address (option 54).
	ServerIP net.IP
	Boot     Boot
	// Seen is told of every network-boot client that asks; nil for none.
	Seen func(Client)
}

// Handle answers one request.
func (p Proxy) Handle(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool) {
	c, ok := Classify(req)
	if !ok || !(c.PXE || c.HTTPBoot) {
		return nil, false
	}
	var t dhcpv4.MessageType
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		t = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		// A DHCPREQUEST that names a server (option 54) selects that server's offer, and
		// only that server answers it (RFC 2131 section 4.3.2): the one for the DHCP server
		// beside the proxy is not ours, and an ACK from us, without an address, could be
		// the one a client takes.
		if id := req.ServerIdentifier(); id != nil && !id.Equal(p.ServerIP) {
			return nil, false
		}
		t = dhcpv4.MessageTypeAck
	case dhcpv4.MessageTypeInform:
		t = dhcpv4.MessageTypeAck
	default:
		return nil, false
	}
	if p.Seen != nil {
		p.Seen(c)
	}
	a, ok := p.Boot.Choose(c)
	if !ok {
		return nil, false
	}
	resp, ok := reply(req, t, p.ServerIP)
	if !ok {
		return nil, false
	}
	resp.YourIPAddr = net.IPv4zero
	resp.ClientIPAddr = req.ClientIPAddr
	addBoot(resp, req, a, p.Boot.TFTPServer)
	return resp, true
}
