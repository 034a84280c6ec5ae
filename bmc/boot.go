package bmc

import (
	"context"
	"slices"

	"github.com/better-compute/better-compute/proto"
)

// BootDevice is where management.setBootDevice makes a machine boot from.
type BootDevice string

// The boot devices.
const (
	// BootPXE: the network, by PXE.
	BootPXE BootDevice = "pxe"
	// BootHTTP: the network, by UEFI HTTP boot.
	BootHTTP BootDevice = "http"
	// BootDisk: the first local disk.
	BootDisk BootDevice = "disk"
	// BootCD: the CD/DVD drive, virtual media included.
	BootCD BootDevice = "cd"
)

// BootDevices lists the devices in the order the documentation gives them.
var BootDevices = []BootDevice{BootPXE, BootHTTP, BootDisk, BootCD}

// ParseBootDevice returns the device s names, or INVALID_CONFIG.
func ParseBootDevice(s string) (BootDevice, error) {
	if d := BootDevice(s); slices.Contains(BootDevices, d) {
		return d, nil
	}
	return "", proto.Errorf(proto.InvalidConfig, "boot device %q is not one of pxe, http, disk, cd", s).WithPath("device")
}

// Management chooses what a machine boots from.
type Management interface {
	// SetBootDevice makes the machine boot from device: at its next boot only, or at
	// every boot when persistent. It takes effect at the next (re)start. A device the
	// BMC does not offer is UNSUPPORTED.
	SetBootDevice(ctx context.Context, device BootDevice, persistent bool) error
}
