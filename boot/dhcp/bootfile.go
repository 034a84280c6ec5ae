package dhcp

import (
	"net"
	"strings"

	"github.com/insomniacslk/dhcp/iana"
)

// Files names the iPXE binaries that firmware which is not iPXE yet is given.
type Files struct {
	// BIOS is for architecture 0 (undionly.kpxe).
	BIOS string
	// UEFI is for x86-64 UEFI, architectures 7 and 9, and UEFI HTTP boot, 16
	// (ipxe.efi, or snponly.efi to use the firmware's network driver).
	UEFI string
	// ARM64 is for arm64 UEFI, architectures 11 and 19; empty when there is none.
	ARM64 string
	// Shim is the signed chain's first stage for x86-64 UEFI PXE clients that boot
	// under Secure Boot (Boot.SecureBoot), in place of UEFI: its TFTP name; empty when
	// the server has none, and such machines get no boot file. UEFI HTTP boot gets none
	// either: the chain's GRUB speaks TFTP only.
	Shim string
}

// Boot is how the server answers a client that boots from the network.
type Boot struct {
	Files Files
	// TFTPServer is the address firmware fetches binaries from (siaddr, option 66).
	TFTPServer net.IP
	// HTTPBase is the boot server's base URL, "http://10.0.0.1" or "http://10.0.0.1:8080":
	// scripts are at /boot/<mac>.ipxe, binaries for HTTP boot at /ipxe/<file>.
	HTTPBase string
	// SecureBoot reports whether a machine boots under UEFI Secure Boot, and so is given
	// Files.Shim rather than iPXE; nil for none.
	SecureBoot func(net.HardwareAddr) bool
}

// Answer is the boot part of a reply.
type Answer struct {
	// File is the boot file name (header and option 67): a TFTP name or an HTTP URL.
	File string
	// TFTP is true when File is to be fetched by TFTP from siaddr.
	TFTP bool
	// VendorClass is echoed in option 60 ("PXEClient" or "HTTPClient"); empty for none.
	VendorClass string
}

// ScriptPath is the path of a machine's iPXE script on the boot server.
func ScriptPath(mac net.HardwareAddr) string {
	return "/boot/" + strings.ReplaceAll(mac.String(), ":", "-") + ".ipxe"
}

// Choose picks what the client boots next, or ok false when the server has nothing for
// it (not a network boot, or an architecture without a binary).
func (b Boot) Choose(c Client) (a Answer, ok bool) {
	// Only UEFI firmware's answer depends on Secure Boot: the machine's entry is looked
	// up for it alone, not for every BIOS, iPXE or other request.
	secure := func() bool { return b.SecureBoot != nil && b.SecureBoot(c.MAC) }
	switch {
	case c.IPXE:
		a = Answer{File: b.HTTPBase + ScriptPath(c.MAC)}
	case c.HTTPBoot:
		path := ""
		switch {
		case secure():
			// Nothing: the signed chain's GRUB speaks TFTP only.
		case c.Arch == iana.EFI_X86_64_HTTP && b.Files.UEFI != "":
			path = "ipxe/" + b.Files.UEFI
		case c.Arch == iana.EFI_ARM64_HTTP && b.Files.ARM64 != "":
			path = "ipxe/" + b.Files.ARM64
		}
		if path == "" {
			return Answer{}, false
		}
		return Answer{File: b.HTTPBase + "/" + path, VendorClass: "HTTPClient"}, true
	case c.PXE && c.HasArch:
		file := ""
		switch c.Arch {
		case iana.INTEL_X86PC:
			file = b.Files.BIOS
		case iana.EFI_X86_64, iana.EFI_BC:
			file = b.Files.UEFI
			if secure() {
				file = b.Files.Shim
			}
		case iana.EFI_ARM64:
			file = b.Files.ARM64
		}
		if file == "" {
			return Answer{}, false
		}
		a = Answer{File: file, TFTP: true}
	default:
		return Answer{}, false
	}
	if c.PXE {
		a.VendorClass = "PXEClient"
	}
	return a, true
}
