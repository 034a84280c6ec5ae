package dhcp

import (
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Proxy is a proxyDHCP server: beside another DHCP server that hands out addresses, it
// answers network-boot clients with boot information only (no address), on port 67 to
// their DHCPDISCOVER (Handle) and on port 4011 to the DHCPREQUEST some firmware sends it
// after (HandleBootServer).
type Proxy struct {
	// ServerIP is this server's address (option 54).
	ServerIP net.IP
	Boot     Boot
	// Seen is told of every network-boot client that asks; nil for none.
	Seen func(Client)
	// Learn is told of the address a network-boot client's DHCPREQUEST carries, on
	// either port and whichever server it names: the one it asks the DHCP server for
	// (option 50), else the one it holds (ciaddr). Nil for none.
	Learn func(mac net.HardwareAddr, ip netip.Addr)
}

// Handle answers one request on port 67. A DHCPREQUEST there is answered only when its
// option 54 names this server: one that names another server selects that server's
// offer, and one without it (INIT-REBOOT, a renewal) is for the server that holds the
// client's lease, which a proxy never is (RFC 2131 section 4.3.2). An acknowledgement
// from the proxy, without an address, could otherwise be the one a client takes.
func (p Proxy) Handle(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool) {
	p.learn(req)
	if req.MessageType() == dhcpv4.MessageTypeRequest && !req.ServerIdentifier().Equal(p.ServerIP) {
		return nil, false
	}
	return p.answer(req)
}

// HandleBootServer answers one request on the boot-server port 4011, where firmware
// sends its DHCPREQUEST to the proxy alone, with or without option 54; one whose option
// 54 names another server is not answered.
func (p Proxy) HandleBootServer(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool) {
	p.learn(req)
	if id := req.ServerIdentifier(); id != nil && !id.Equal(p.ServerIP) {
		return nil, false
	}
	return p.answer(req)
}

// learn tells Learn of the address a network-boot client's DHCPREQUEST carries.
func (p Proxy) learn(req *dhcpv4.DHCPv4) {
	if p.Learn == nil || req.MessageType() != dhcpv4.MessageTypeRequest {
		return
	}
	c, ok := Classify(req)
	if !ok || !c.Netboot() {
		return
	}
	ip := addr(req.RequestedIPAddress())
	if !ip.IsValid() {
		ip = addr(req.ClientIPAddr)
	}
	if ip.IsValid() {
		p.Learn(c.MAC, ip)
	}
}

// answer answers a request the port's rule let through.
func (p Proxy) answer(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool) {
	c, ok := Classify(req)
	if !ok || !(c.PXE || c.HTTPBoot) {
		return nil, false
	}
	var t dhcpv4.MessageType
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		t = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest, dhcpv4.MessageTypeInform:
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
	resp := reply(req, t, p.ServerIP)
	resp.YourIPAddr = net.IPv4zero
	resp.ClientIPAddr = req.ClientIPAddr
	addBoot(resp, req, a, p.Boot.TFTPServer)
	return resp, true
}
