package redfish

import (
	"cmp"
	"context"
	"strings"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

const mib = 1 << 20

// The bounds of what Inspect keeps of a BMC's description of its machine, which goes to
// the step's result, the store and the operator as the BMC wrote it: a BMC answers
// whatever its firmware (or whoever controls it) says, up to the maxRead one read holds.
const (
	// maxInventoryText bounds each string of the inventory, cut at a character's boundary
	// and marked "...": a model, serial number, firmware version or slot label is tens of
	// bytes, and one of a few KiB would push the step's result past what the registry
	// takes of one (proto.MaxStepResult), failing the whole inspection.
	maxInventoryText = 256
	// maxInventoryBytes bounds a size (memory, a DIMM, a drive): 2^53-1 bytes (8 PiB), the
	// largest whole number every JSON client reads exactly, and more than any machine
	// holds.
	maxInventoryBytes = 1<<53 - 1
	// maxInventoryCount bounds a count or a speed (cores, threads, MHz, Mbps): 2^24, past
	// the 1.6 Tb/s of the fastest NIC in Mb/s and the cores of any socket.
	maxInventoryCount = 1 << 24
)

// Inspect reads the system, its processors, memory, Ethernet interfaces and storage
// drives, and the firmware of the manager that manages it. Only the system itself must
// answer: a part the BMC links but fails to serve (sushy-tools links a Memory collection
// it answers 404 for) is named in Unread, and what could be read of it is kept.
func (d *driver) Inspect(ctx context.Context) (proto.OOBInventory, error) {
	sys, err := d.system(ctx)
	if err != nil {
		return proto.OOBInventory{}, err
	}
	inv := proto.OOBInventory{
		System: proto.OOBSystem{
			Manufacturer: text(sys.Manufacturer),
			Model:        text(sys.Model),
			SerialNumber: text(sys.SerialNumber),
			UUID:         text(sys.UUID),
			BIOSVersion:  text(sys.BiosVersion),
		},
		PowerState: powerState(sys.PowerState),
		Memory:     proto.OOBMemory{TotalBytes: size(gofish.Deref(sys.MemorySummary.TotalSystemMemoryGiB) * 1024 * mib)},
	}
	cpus, err := sys.Processors()
	if err := d.unread(ctx, &inv, "cpus", "read processors", err); err != nil {
		return proto.OOBInventory{}, err
	}
	for _, p := range cpus {
		if p.ProcessorType != "" && p.ProcessorType != schemas.CPUProcessorType {
			continue
		}
		inv.CPUs = append(inv.CPUs, proto.OOBCPU{
			Socket:       text(p.Socket),
			Manufacturer: text(p.Manufacturer),
			Model:        text(p.Model),
			Cores:        count(p.TotalCores),
			Threads:      count(p.TotalThreads),
			MaxSpeedMHz:  count(p.MaxSpeedMHz),
		})
	}
	dimms, err := sys.Memory()
	if err := d.unread(ctx, &inv, "memory", "read memory", err); err != nil {
		return proto.OOBInventory{}, err
	}
	for _, m := range dimms {
		inv.Memory.Modules = append(inv.Memory.Modules, proto.OOBMemoryModule{
			Locator:       text(locator(m)),
			CapacityBytes: size(float64(gofish.Deref(m.CapacityMiB)) * mib),
			Type:          text(string(m.MemoryDeviceType)),
			SpeedMHz:      count(m.OperatingSpeedMhz),
		})
	}
	nics, err := sys.EthernetInterfaces()
	if err := d.unread(ctx, &inv, "nics", "read Ethernet interfaces", err); err != nil {
		return proto.OOBInventory{}, err
	}
	for _, n := range nics {
		mac := n.MACAddress
		if mac == "" {
			mac = n.PermanentMACAddress
		}
		inv.NICs = append(inv.NICs, proto.OOBNIC{Name: text(n.ID), MAC: text(strings.ToLower(mac)), SpeedMbps: count(n.SpeedMbps)})
	}
	storage, err := sys.Storage()
	if err := d.unread(ctx, &inv, "storage", "read storage", err); err != nil {
		return proto.OOBInventory{}, err
	}
	for _, s := range storage {
		drives, err := s.Drives()
		if err := d.unread(ctx, &inv, "storage", "read the drives of storage "+s.ID, err); err != nil {
			return proto.OOBInventory{}, err
		}
		for _, dr := range drives {
			inv.Storage = append(inv.Storage, proto.OOBDrive{
				Name:          text(dr.Name),
				Model:         text(dr.Model),
				SerialNumber:  text(dr.SerialNumber),
				CapacityBytes: size(float64(gofish.Deref(dr.CapacityBytes))),
				MediaType:     text(string(dr.MediaType)),
				Protocol:      text(string(dr.Protocol)),
			})
		}
	}
	managers, err := sys.ManagedBy()
	if err := d.unread(ctx, &inv, "bmc", "read the system's managers", err); err != nil {
		return proto.OOBInventory{}, err
	}
	if len(managers) > 0 {
		inv.BMC = proto.OOBController{Model: text(managers[0].Model), FirmwareVersion: text(managers[0].FirmwareVersion)}
	}
	return inv, nil
}

// unread names a part of the inventory the BMC failed to serve in inv.Unread. It
// returns an error only when the step's context has ended, which ends the inspection.
func (d *driver) unread(ctx context.Context, inv *proto.OOBInventory, part, op string, err error) error {
	if err == nil {
		return nil
	}
	failure := d.fail(ctx, op, err)
	if bmc.Expired(ctx) {
		return failure
	}
	d.log.Warn("part of the inventory unread", "part", part, "err", failure)
	inv.Unread = append(inv.Unread, proto.OOBUnread{Part: part, Error: proto.AsError(failure).Message})
	return nil
}

// locator is a DIMM's slot label: Location.PartLocation.ServiceLabel, which Redfish 1.9
// put in place of DeviceLocator, else DeviceLocator, which BMCs of earlier schemas give.
func locator(m *schemas.Memory) string {
	return cmp.Or(m.Location.PartLocation.ServiceLabel, m.DeviceLocator)
}

// text is a string of the BMC's as the inventory keeps it: at most maxInventoryText
// bytes, cut between characters, and the mark of the cut.
func text(s string) string { return clipTo(s, maxInventoryText) }

// size is a size the BMC gave, in bytes, as the inventory keeps it: 0, as a size the BMC
// does not give, when it is negative, past maxInventoryBytes or not a number (a product
// past what float64 holds is infinite). It is computed in float64 so that a DIMM's MiB
// never wraps around int64 into a size that looks like one.
func size(bytes float64) int64 {
	if !(bytes >= 0 && bytes <= maxInventoryBytes) {
		return 0
	}
	return int64(bytes)
}

// count is a count or a speed the BMC gave as the inventory keeps it: 0, as one the BMC
// does not give, when it is negative or past maxInventoryCount.
func count(v *int) int {
	n := gofish.Deref(v)
	if n < 0 || n > maxInventoryCount {
		return 0
	}
	return n
}
