package bmc

import (
	"context"

	"github.com/better-compute/better-compute/proto"
)

// PowerState is a machine's power as its BMC reports it.
type PowerState string

// The power states.
const (
	PowerOn          PowerState = "on"
	PowerOff         PowerState = "off"
	PowerPoweringOn  PowerState = "powering-on"
	PowerPoweringOff PowerState = "powering-off"
	PowerPaused      PowerState = "paused"
	// PowerUnknown: the BMC reported nothing, or something no driver knows.
	PowerUnknown PowerState = "unknown"
)

// Power reads and changes a machine's power.
type Power interface {
	// GetPower returns the machine's power state.
	GetPower(ctx context.Context) (PowerState, error)
	// SetPower performs the action and, where the BMC is asynchronous, waits (bounded)
	// until the machine has reached the state the action leads to. An action the BMC
	// says it does not offer is UNSUPPORTED.
	SetPower(ctx context.Context, action proto.PowerAction) error
}
