package bmc

import (
	"context"

	"github.com/better-compute/better-compute/proto"
)

// Management chooses what a machine boots from.
type Management interface {
	// SetBootDevice makes the machine boot from device: at its next boot only, or at
	// every boot when persistent. It takes effect at the next (re)start. A device the
	// BMC does not offer is UNSUPPORTED.
	SetBootDevice(ctx context.Context, device proto.BootDevice, persistent bool) error
}
