package bmc

import (
	"context"
	"slices"

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

// PowerAction is what power.setPower asks of a machine.
type PowerAction string

// The seven power actions of power.setPower.
const (
	// ActionOn powers the machine on; nothing happens when it is on.
	ActionOn PowerAction = "on"
	// ActionOff cuts power at once; nothing happens when it is off.
	ActionOff PowerAction = "off"
	// ActionGracefulOff asks the OS to shut down and waits until the machine is off.
	ActionGracefulOff PowerAction = "graceful-off"
	// ActionReset restarts the machine at once.
	ActionReset PowerAction = "reset"
	// ActionGracefulRestart asks the OS to restart.
	ActionGracefulRestart PowerAction = "graceful-restart"
	// ActionCycle powers the machine off, then on.
	ActionCycle PowerAction = "cycle"
	// ActionNMI raises a non-maskable interrupt (a crash dump on most OSes).
	ActionNMI PowerAction = "nmi"
)

// PowerActions lists the actions in the order the documentation gives them.
var PowerActions = []PowerAction{ActionOn, ActionOff, ActionGracefulOff, ActionReset,
	ActionGracefulRestart, ActionCycle, ActionNMI}

// ParsePowerAction returns the action s names, or INVALID_CONFIG.
func ParsePowerAction(s string) (PowerAction, error) {
	if a := PowerAction(s); slices.Contains(PowerActions, a) {
		return a, nil
	}
	return "", proto.Errorf(proto.InvalidConfig, "power action %q is not one of on, off, graceful-off, reset, graceful-restart, cycle, nmi", s).WithPath("action")
}

// Restarts reports whether the action boots the machine afresh: reset, graceful-restart
// and cycle do, and on a machine that is off each of them powers it on.
func (a PowerAction) Restarts() bool {
	return a == ActionReset || a == ActionGracefulRestart || a == ActionCycle
}

// Power reads and changes a machine's power.
type Power interface {
	// GetPower returns the machine's power state.
	GetPower(ctx context.Context) (PowerState, error)
	// SetPower performs the action and, where the BMC is asynchronous, waits (bounded)
	// until the machine has reached the state the action leads to. An action the BMC
	// says it does not offer is UNSUPPORTED.
	SetPower(ctx context.Context, action PowerAction) error
}
