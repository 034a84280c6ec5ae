package qmp

import (
	"context"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
)

// runStates maps qemu's run states (query-status) to power states. A VM is on while
// its vCPUs run, or sleep (suspended, ACPI S3); it is off when it has not started
// (prelaunch, under -S), was stopped (paused: the driver's forced off), powered itself
// off (shutdown, under -no-shutdown), or halted on an error. Migration states are
// unknown.
var runStates = map[string]proto.PowerState{
	"running":        proto.PowerStateOn,
	"suspended":      proto.PowerStateOn,
	"prelaunch":      proto.PowerStateOff,
	"paused":         proto.PowerStateOff,
	"shutdown":       proto.PowerStateOff,
	"guest-panicked": proto.PowerStateOff,
	"internal-error": proto.PowerStateOff,
	"io-error":       proto.PowerStateOff,
	"watchdog":       proto.PowerStateOff,
}

func powerState(status string) proto.PowerState {
	if p, ok := runStates[status]; ok {
		return p
	}
	return proto.PowerStateUnknown
}

func status(c *conn) (proto.PowerState, error) {
	var st struct {
		Status string `json:"status"`
	}
	if err := c.execute("query-status", nil, &st); err != nil {
		return "", err
	}
	return powerState(st.Status), nil
}

// GetPower maps query-status.
func (d *driver) GetPower(ctx context.Context) (proto.PowerState, error) {
	var p proto.PowerState
	err := d.session(ctx, "query-status", func(c *conn) (err error) {
		p, err = status(c)
		return err
	})
	return p, err
}

// SetPower performs the action:
//
//	on                system_reset, then cont (nothing when on)
//	off               stop (nothing when off)
//	graceful-off      system_powerdown, then wait until the guest has shut down
//	reset             system_reset
//	graceful-restart  system_powerdown, wait until off, then on
//	cycle             stop, then on
//	nmi               inject-nmi
//
// A restart (reset, graceful-restart, cycle) of a VM that is off is on. Every power-on
// resets the VM first, so that it boots afresh with the boot order set since.
func (d *driver) SetPower(ctx context.Context, action proto.PowerAction) error {
	if _, err := proto.ParsePowerAction(string(action)); err != nil {
		return err
	}
	var state proto.PowerState
	err := d.session(ctx, string(action), func(c *conn) (err error) {
		if state, err = status(c); err != nil {
			return err
		}
		on, off := state == proto.PowerStateOn, state == proto.PowerStateOff
		d.log.Info("power", "action", string(action), "state", string(state))
		switch {
		case action == proto.PowerActionNMI:
			return c.execute("inject-nmi", nil, nil)
		case action == proto.PowerActionOn && on, (action == proto.PowerActionOff || action == proto.PowerActionGracefulOff) && off:
			return nil
		case action == proto.PowerActionOff:
			return c.execute("stop", nil, nil)
		case action == proto.PowerActionGracefulOff, action == proto.PowerActionGracefulRestart && !off:
			return c.execute("system_powerdown", nil, nil)
		case action == proto.PowerActionReset && on:
			return d.reset(c)
		case action == proto.PowerActionCycle && !off:
			if err := c.execute("stop", nil, nil); err != nil {
				return err
			}
		}
		return d.powerOn(c)
	})
	if err != nil || state == proto.PowerStateOff {
		return err
	}
	switch action {
	case proto.PowerActionGracefulOff:
		return bmc.WaitPower(ctx, d, proto.PowerStateOff, d.timing)
	case proto.PowerActionGracefulRestart:
		if err := bmc.WaitPower(ctx, d, proto.PowerStateOff, d.timing); err != nil {
			return err
		}
		return d.session(ctx, "power on", d.powerOn)
	}
	return nil
}

// powerOn resets the VM and lets its vCPUs run.
func (d *driver) powerOn(c *conn) error {
	if err := d.reset(c); err != nil {
		return err
	}
	return c.execute("cont", nil, nil)
}

// reset readies the boot order for the boot to come, then resets the VM.
func (d *driver) reset(c *conn) error {
	if err := d.nextBoot(c); err != nil {
		return err
	}
	return c.execute("system_reset", nil, nil)
}
