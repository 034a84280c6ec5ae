package redfish

import (
	"context"
	"slices"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
	"github.com/stmcginnis/gofish/schemas"
)

// resetTypes maps each power action to the ComputerSystem.Reset type that performs it.
var resetTypes = map[proto.PowerAction]schemas.ResetType{
	proto.PowerActionOn:              schemas.OnResetType,
	proto.PowerActionOff:             schemas.ForceOffResetType,
	proto.PowerActionGracefulOff:     schemas.GracefulShutdownResetType,
	proto.PowerActionReset:           schemas.ForceRestartResetType,
	proto.PowerActionGracefulRestart: schemas.GracefulRestartResetType,
	proto.PowerActionCycle:           schemas.PowerCycleResetType,
	proto.PowerActionNMI:             schemas.NmiResetType,
}

// powerStates maps Redfish's PowerState to the project's.
var powerStates = map[schemas.PowerState]proto.PowerState{
	schemas.OnPowerState:          proto.PowerStateOn,
	schemas.OffPowerState:         proto.PowerStateOff,
	schemas.PoweringOnPowerState:  proto.PowerStatePoweringOn,
	schemas.PoweringOffPowerState: proto.PowerStatePoweringOff,
	schemas.PausedPowerState:      proto.PowerStatePaused,
}

func powerState(s schemas.PowerState) proto.PowerState {
	if p, ok := powerStates[s]; ok {
		return p
	}
	return proto.PowerStateUnknown
}

// GetPower reads the system's PowerState.
func (d *driver) GetPower(ctx context.Context) (proto.PowerState, error) {
	sys, err := d.system(ctx)
	if err != nil {
		return "", err
	}
	return powerState(sys.PowerState), nil
}

// SetPower performs the action with ComputerSystem.Reset and waits for the state it
// leads to: on for on and the restarts, off for off and graceful-off. An action whose
// state holds already is done; a restart of a machine that is off powers it on. A cycle
// on a BMC that does not offer PowerCycle is ForceOff, then On.
func (d *driver) SetPower(ctx context.Context, action proto.PowerAction) error {
	want, ok := resetTypes[action]
	if !ok {
		_, err := proto.ParsePowerAction(string(action))
		return err
	}
	sys, err := d.system(ctx)
	if err != nil {
		return err
	}
	offered, err := sys.GetSupportedResetTypes()
	if err != nil {
		// A broken ActionInfo says nothing of what the BMC offers: let it answer.
		d.log.Warn("reading the reset action's allowable values failed", "err", err)
		offered = nil
	}
	state := powerState(sys.PowerState)
	switch {
	case action == proto.PowerActionOn && state == proto.PowerStateOn,
		(action == proto.PowerActionOff || action == proto.PowerActionGracefulOff) && state == proto.PowerStateOff:
		return nil
	case action.Restarts() && state == proto.PowerStateOff:
		return d.reset(ctx, sys, offered, schemas.OnResetType, proto.PowerStateOn)
	case action == proto.PowerActionCycle && len(offered) > 0 && !slices.Contains(offered, schemas.PowerCycleResetType):
		d.log.Debug("the BMC offers no PowerCycle: ForceOff, then On")
		if err := d.reset(ctx, sys, offered, schemas.ForceOffResetType, proto.PowerStateOff); err != nil {
			return err
		}
		return d.reset(ctx, sys, offered, schemas.OnResetType, proto.PowerStateOn)
	case action == proto.PowerActionNMI:
		return d.reset(ctx, sys, offered, want, "")
	case action == proto.PowerActionOff || action == proto.PowerActionGracefulOff:
		return d.reset(ctx, sys, offered, want, proto.PowerStateOff)
	default:
		return d.reset(ctx, sys, offered, want, proto.PowerStateOn)
	}
}

// reset posts one reset type, refused beforehand as UNSUPPORTED when the BMC lists the
// types it offers without it, then waits until the system is in state then (no wait
// when then is empty).
func (d *driver) reset(ctx context.Context, sys *schemas.ComputerSystem, offered []schemas.ResetType, rt schemas.ResetType, then proto.PowerState) error {
	if len(offered) > 0 && !slices.Contains(offered, rt) {
		return proto.Errorf(proto.Unsupported, "redfish %s: the system offers no reset type %s, only %s", d.host, rt, listed(offered))
	}
	d.log.Info("reset", "resetType", string(rt))
	if _, err := sys.Reset(rt); err != nil {
		return d.fail(ctx, "reset "+string(rt), err)
	}
	if then == "" {
		return nil
	}
	return bmc.WaitPower(ctx, d, then, d.timing)
}
