package bmc

import (
	"context"

	"github.com/better-compute/better-compute/proto"
)

// Power reads and changes a machine's power.
type Power interface {
	// GetPower returns the machine's power state.
	GetPower(ctx context.Context) (proto.PowerState, error)
	// SetPower performs the action and, where the BMC is asynchronous, waits (bounded)
	// until the machine has reached the state the action leads to. An action the BMC
	// says it does not offer is UNSUPPORTED.
	SetPower(ctx context.Context, action proto.PowerAction) error
}
