package redfish

import (
	"context"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
	"github.com/stmcginnis/gofish/schemas"
)

// bootTargets maps each boot device to its BootSourceOverrideTarget.
var bootTargets = map[bmc.BootDevice]schemas.BootSource{
	bmc.BootPXE:  schemas.PxeBootSource,
	bmc.BootHTTP: schemas.UefiHTTPBootSource,
	bmc.BootDisk: schemas.HddBootSource,
	bmc.BootCD:   schemas.CdBootSource,
}

// SetBootDevice sets the system's boot override: the device's target, Enabled Once or
// Continuous, and a mode when one is needed (UEFI for UEFI HTTP boot, option bootMode
// for every target when given). It reads the override back, since a BMC may accept a
// PATCH it does not apply.
func (d *driver) SetBootDevice(ctx context.Context, device bmc.BootDevice, persistent bool) error {
	target, ok := bootTargets[device]
	if !ok {
		_, err := bmc.ParseBootDevice(string(device))
		return err
	}
	sys, err := d.system(ctx)
	if err != nil {
		return err
	}
	if allowed := sys.Boot.AllowableBootSourceOverrideTargetValues; len(allowed) > 0 && !slices.Contains(allowed, target) {
		names := make([]string, len(allowed))
		for i, a := range allowed {
			names[i] = string(a)
		}
		return proto.Errorf(proto.Unsupported, "redfish %s: the system offers no boot override target %s, only %s", d.host, target, strings.Join(names, ", "))
	}
	enabled := schemas.OnceBootSourceOverrideEnabled
	if persistent {
		enabled = schemas.ContinuousBootSourceOverrideEnabled
	}
	boot := &schemas.Boot{BootSourceOverrideTarget: target, BootSourceOverrideEnabled: enabled, BootSourceOverrideMode: d.bootMode}
	if target == schemas.UefiHTTPBootSource {
		boot.BootSourceOverrideMode = schemas.UEFIBootSourceOverrideMode
	}
	d.log.Info("boot override", "target", string(target), "enabled", string(enabled), "mode", string(boot.BootSourceOverrideMode))
	if err := sys.SetBoot(boot); err != nil {
		return d.fail(ctx, "set boot override "+string(target)+" "+string(enabled), err)
	}
	if sys, err = d.system(ctx); err != nil {
		return err
	}
	if got := sys.Boot; got.BootSourceOverrideTarget != target || got.BootSourceOverrideEnabled != enabled {
		return proto.Errorf(proto.DriverError, "redfish %s: the BMC accepted boot override %s %s but reports %s %s", d.host, target, enabled, got.BootSourceOverrideTarget, got.BootSourceOverrideEnabled)
	}
	return nil
}
