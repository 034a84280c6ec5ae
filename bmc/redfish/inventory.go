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
			Manufacturer: sys.Manufacturer,
			Model:        sys.Model,
			SerialNumber: sys.SerialNumber,
			UUID:         sys.UUID,
			BIOSVersion:  sys.BiosVersion,
		},
		PowerState: powerState(sys.PowerState),
		Memory:     proto.OOBMemory{TotalBytes: int64(gofish.Deref(sys.MemorySummary.TotalSystemMemoryGiB) * 1024 * mib)},
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
			Socket:       p.Socket,
			Manufacturer: p.Manufacturer,
			Model:        p.Model,
			Cores:        gofish.Deref(p.TotalCores),
			Threads:      gofish.Deref(p.TotalThreads),
			MaxSpeedMHz:  gofish.Deref(p.MaxSpeedMHz),
		})
	}
	dimms, err := sys.Memory()
	if err := d.unread(ctx, &inv, "memory", "read memory", err); err != nil {
		return proto.OOBInventory{}, err
	}
	for _, m := range dimms {
		inv.Memory.Modules = append(inv.Memory.Modules, proto.OOBMemoryModule{
			Locator:       locator(m),
			CapacityBytes: int64(gofish.Deref(m.CapacityMiB)) * mib,
			Type:          string(m.MemoryDeviceType),
			SpeedMHz:      gofish.Deref(m.OperatingSpeedMhz),
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
		inv.NICs = append(inv.NICs, proto.OOBNIC{Name: n.ID, MAC: strings.ToLower(mac), SpeedMbps: gofish.Deref(n.SpeedMbps)})
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
				Name:          dr.Name,
				Model:         dr.Model,
				SerialNumber:  dr.SerialNumber,
				CapacityBytes: int64(gofish.Deref(dr.CapacityBytes)),
				MediaType:     string(dr.MediaType),
				Protocol:      string(dr.Protocol),
			})
		}
	}
	managers, err := sys.ManagedBy()
	if err := d.unread(ctx, &inv, "bmc", "read the system's managers", err); err != nil {
		return proto.OOBInventory{}, err
	}
	if len(managers) > 0 {
		inv.BMC = proto.OOBController{Model: managers[0].Model, FirmwareVersion: managers[0].FirmwareVersion}
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
