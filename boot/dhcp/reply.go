package dhcp

import (
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Handler answers one request: the reply, and false when there is none to send.
type Handler func(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool)

// reply starts a reply of type t to req from server.
func reply(req *dhcpv4.DHCPv4, t dhcpv4.MessageType, server net.IP) (*dhcpv4.DHCPv4, bool) {
	resp, err := dhcpv4.NewReplyFromRequest(req,
		dhcpv4.WithMessageType(t),
		dhcpv4.WithServerIP(server),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server)),
	)
	if err != nil {
		return nil, false
	}
	return resp, true
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
