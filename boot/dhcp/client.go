// Package dhcp answers DHCPv4 for the boot server, as plain functions of the request: an
// authoritative server for a range (leases from boot/lease) and a proxyDHCP server beside
// another DHCP server that gives boot information only. Both tell firmware which iPXE
// binary to fetch by TFTP (by client architecture), UEFI HTTP boot which URL to fetch,
// and iPXE which script to chain. Serve runs a handler on a socket.
package dhcp

import (
	"encoding/hex"
	"net"
	"slices"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// Client is what a request says about the machine that sent it.
type Client struct {
	// MAC is the client's hardware address (chaddr).
	MAC net.HardwareAddr
	// Arch is the first architecture of option 93; HasArch is false without one.
	Arch    iana.Arch
	HasArch bool
	// PXE: option 60 starts with "PXEClient" (PXE firmware, and iPXE).
	PXE bool
	// HTTPBoot: option 60 starts with "HTTPClient" (UEFI HTTP boot).
	HTTPBoot bool
	// IPXE: option 77 holds "iPXE", so the client is iPXE already and wants a script.
	IPXE bool
	// UUID is option 97's product UUID spelled by FormatUUID; empty without one.
	UUID string
}

// Netboot reports whether the client asks to boot from the network.
func (c Client) Netboot() bool { return c.PXE || c.HTTPBoot || c.IPXE }

// MachineMAC reports whether mac can be a machine's own: 6 bytes, neither all zero nor
// a group address (multicast, broadcast included: the low bit of the first byte).
func MachineMAC(mac net.HardwareAddr) bool {
	return len(mac) == 6 && mac[0]&1 == 0 && !slices.Equal(mac, make(net.HardwareAddr, 6))
}

// Classify reads a request's client; ok is false for anything but an Ethernet request
// from a MachineMAC.
func Classify(req *dhcpv4.DHCPv4) (c Client, ok bool) {
	if req.OpCode != dhcpv4.OpcodeBootRequest || req.HWType != iana.HWTypeEthernet || !MachineMAC(req.ClientHWAddr) {
		return Client{}, false
	}
	c.MAC = append(net.HardwareAddr(nil), req.ClientHWAddr...)
	if archs := req.ClientArch(); len(archs) > 0 {
		c.Arch, c.HasArch = archs[0], true
	}
	vc := req.ClassIdentifier()
	c.PXE = strings.HasPrefix(vc, "PXEClient")
	c.HTTPBoot = strings.HasPrefix(vc, "HTTPClient")
	for _, uc := range req.UserClass() {
		if uc == "iPXE" {
			c.IPXE = true
		}
	}
	if id := req.GetOneOption(dhcpv4.OptionClientMachineIdentifier); len(id) == 17 && id[0] == 0 {
		c.UUID = FormatUUID(id[1:])
	}
	return c, true
}

// FormatUUID spells option 97's 16 bytes as a UUID the way dmidecode, the kernel's
// /sys/class/dmi/id/product_uuid, Redfish and qemu's -uuid spell the machine's SMBIOS
// UUID: firmware copies the SMBIOS bytes as they are stored, whose first three fields are
// little-endian (SMBIOS 2.6 and later), so those three are byte-swapped here. The other
// spelling, the bytes in the order sent, names the same machine; docs/boot.md has the
// measurement behind this choice.
func FormatUUID(b []byte) string {
	u := [16]byte(b)
	slices.Reverse(u[0:4])
	slices.Reverse(u[4:6])
	slices.Reverse(u[6:8])
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
