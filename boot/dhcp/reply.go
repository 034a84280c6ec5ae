package dhcp

import (
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// Handler answers one request: the reply, and false when there is none to send.
type Handler func(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool)

// reply starts a reply of type t to req from server: what dhcpv4.NewReplyFromRequest
// builds, without drawing a random transaction id (the request's replaces it), which
// cost each reply a context, a timer and a getrandom system call.
func reply(req *dhcpv4.DHCPv4, t dhcpv4.MessageType, server net.IP) *dhcpv4.DHCPv4 {
	resp := &dhcpv4.DHCPv4{
		OpCode:        dhcpv4.OpcodeBootRequest,
		HWType:        iana.HWTypeEthernet,
		ClientHWAddr:  make(net.HardwareAddr, 6),
		ClientIPAddr:  net.IPv4zero,
		YourIPAddr:    net.IPv4zero,
		ServerIPAddr:  net.IPv4zero,
		GatewayIPAddr: net.IPv4zero,
		Options:       dhcpv4.Options{},
	}
	for _, mod := range []dhcpv4.Modifier{
		dhcpv4.WithReply(req),
		dhcpv4.WithGatewayIP(req.GatewayIPAddr),
		dhcpv4.WithOptionCopied(req, dhcpv4.OptionRelayAgentInformation),
		dhcpv4.WithOptionCopied(req, dhcpv4.OptionClientIdentifier), // RFC 6842
		dhcpv4.WithMessageType(t),
		dhcpv4.WithServerIP(server),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server)),
	} {
		mod(resp)
	}
	return resp
}

// addBoot writes a boot answer into resp. Option 97 is echoed, as PXE asks of servers.
func addBoot(resp, req *dhcpv4.DHCPv4, a Answer, tftp net.IP) {
	resp.BootFileName = a.File
	resp.UpdateOption(dhcpv4.OptBootFileName(a.File))
	if a.TFTP {
		resp.ServerIPAddr = tftp
		resp.UpdateOption(dhcpv4.OptTFTPServerName(tftp.String()))
	}
	if a.VendorClass != "" {
		resp.UpdateOption(dhcpv4.OptClassIdentifier(a.VendorClass))
	}
	if a.VendorClass == "PXEClient" {
		// PXE discovery control (vendor option 6) = 8: use the boot file of this reply,
		// without boot-server discovery.
		resp.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionVendorSpecificInformation, []byte{6, 1, 8, 255}))
	}
	if uuid := req.GetOneOption(dhcpv4.OptionClientMachineIdentifier); uuid != nil {
		resp.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionClientMachineIdentifier, uuid))
	}
}
