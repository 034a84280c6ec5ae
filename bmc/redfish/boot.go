package redfish

import (
	"context"
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/stmcginnis/gofish/schemas"
)

// bootTargets maps each boot device to its BootSourceOverrideTarget.
var bootTargets = map[proto.BootDevice]schemas.BootSource{
	proto.BootDevicePXE:  schemas.PxeBootSource,
	proto.BootDeviceHTTP: schemas.UefiHTTPBootSource,
	proto.BootDeviceDisk: schemas.HddBootSource,
	proto.BootDeviceCD:   schemas.CdBootSource,
}

// SetBootDevice sets the system's boot override: the device's target, Enabled Once or
// Continuous, and a mode when one is needed (UEFI for UEFI HTTP boot, option bootMode
// for every target when given). It reads the override back, since a BMC may accept a
// PATCH it does not apply; see sameEnabled and sameTarget for what a BMC may report
// instead of what was asked.
func (d *driver) SetBootDevice(ctx context.Context, device proto.BootDevice, persistent bool) error {
	target, ok := bootTargets[device]
	if !ok {
		_, err := proto.ParseBootDevice(string(device))
		return err
	}
	sys, err := d.system(ctx)
	if err != nil {
		return err
	}
	if allowed := sys.Boot.AllowableBootSourceOverrideTargetValues; len(allowed) > 0 && !slices.Contains(allowed, target) {
		return proto.Errorf(proto.Unsupported, "redfish %s: the system offers no boot override target %s, only %s", d.host, target, listed(allowed))
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
	got := sys.Boot
	if !sameTarget(target, got.BootSourceOverrideTarget) || !sameEnabled(enabled, got.BootSourceOverrideEnabled) {
		return proto.Errorf(proto.DriverError, "redfish %s: the BMC accepted boot override %s %s but reports %s %s", d.host, target, enabled, clipName(string(got.BootSourceOverrideTarget)), clipName(string(got.BootSourceOverrideEnabled)))
	}
	if got.BootSourceOverrideTarget != target || got.BootSourceOverrideEnabled != enabled {
		d.log.Warn("the BMC keeps the boot override in its own way", "asked", string(target)+" "+string(enabled), "reports", string(got.BootSourceOverrideTarget)+" "+string(got.BootSourceOverrideEnabled))
	}
	return nil
}

// sameEnabled tells whether the override's Enabled as read back does what was asked: a
// one-time override may read back Continuous, from BMCs that keep every override
// (sushy-tools; libvirt-backed BMCs): the device then boots at every start until the
// next override, and the site's boot server sends a machine that network-boots without
// work to its disk.
func sameEnabled(asked, got schemas.BootSourceOverrideEnabled) bool {
	return got == asked || (asked == schemas.OnceBootSourceOverrideEnabled && got == schemas.ContinuousBootSourceOverrideEnabled)
}

// sameTarget tells whether the override's target as read back boots what was asked: a
// UEFI HTTP boot given no HttpBootUri may read back as Pxe (sushy-tools), a network boot
// all the same, which the site's DHCP server answers either way.
func sameTarget(asked, got schemas.BootSource) bool {
	return got == asked || (asked == schemas.UefiHTTPBootSource && got == schemas.PxeBootSource)
}
