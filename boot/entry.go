package boot

import (
	"net"
	"strings"
)

// Entries tells the boot server how each known machine boots: the site agent answers
// from the boot entries of its NodeSpec. ok is false for a machine the site does not
// know, which the server reports to Discoveries. Entry is called for every script
// request and for the DHCP requests of UEFI firmware (Secure Boot), Has for every DHCP
// request, from many goroutines at once, so both must be quick and safe for concurrent
// use; Has, which the DHCP server asks whether it knows a client, builds nothing.
type Entries interface {
	Entry(mac net.HardwareAddr) (e Entry, ok bool)
	// Has reports whether Entry has an entry for mac.
	Has(mac net.HardwareAddr) bool
}

// Kind is what a machine's entry makes it boot.
type Kind string

// The kinds of entry.
const (
	// KindRamdisk boots the ramdisk (bcd ramdisk) with its per-boot token.
	KindRamdisk Kind = "ramdisk"
	// KindDisk leaves iPXE so the firmware boots the local disk.
	KindDisk Kind = "disk"
	// KindSanboot boots an ISO from the site cache with iPXE's sanboot.
	KindSanboot Kind = "sanboot"
)

// Entry is how one machine boots.
type Entry struct {
	Kind Kind
	// Ramdisk is what KindRamdisk boots.
	Ramdisk Ramdisk
	// ISO is the http:// URL of the ISO that KindSanboot boots, in the site cache.
	ISO string
	// SecureBoot says the machine boots with UEFI Secure Boot on, so its firmware would
	// refuse iPXE: x86-64 UEFI firmware is given the signed chain instead (shim, which
	// starts GRUB, which loads /boot/<mac>.grub: the same boot in GRUB's language).
	// KindSanboot has no GRUB counterpart.
	SecureBoot bool
}

// Ramdisk is a ramdisk boot: a kernel, an initrd and the command line that lets the
// ramdisk agent join the registry.
type Ramdisk struct {
	// Kernel and Initrd are file names in Config.RamdiskDir (served at /ramdisk/<name>)
	// or http:// URLs.
	Kernel, Initrd string
	// Token is the ramdisk join token minted for this boot (bc.token=).
	Token string
	// Registry is the registry's endpoint the ramdisk joins (bc.registry=).
	Registry string
	// Pins are the registry's three key pins, "sha256/<base64>" each (bc.pins=, comma
	// separated).
	Pins []string
	// Args are further kernel arguments, for example "console=ttyS0,115200".
	Args []string
	// Extras are the http:// URLs of extra initrds, loaded after Initrd in order: the
	// kernel unpacks each over the files of the ones before.
	Extras []string
}

// CommandLine is the kernel command line of a ramdisk boot: Args, then bc.registry,
// bc.pins and bc.token, each left out when empty.
func (r Ramdisk) CommandLine() []string {
	out := append([]string(nil), r.Args...)
	if r.Registry != "" {
		out = append(out, "bc.registry="+r.Registry)
	}
	if len(r.Pins) > 0 {
		out = append(out, "bc.pins="+strings.Join(r.Pins, ","))
	}
	if r.Token != "" {
		out = append(out, "bc.token="+r.Token)
	}
	return out
}
