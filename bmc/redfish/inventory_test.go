package redfish

import (
	"context"
	"testing"

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestInspect(t *testing.T) {
	sim := newSim(t, redfishsim.Config{PowerState: "On"})
	d := open(t, config(t, sim))
	got, err := d.Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cpu := proto.OOBCPU{Manufacturer: "Intel", Model: "Xeon Platinum 8480+", Cores: 56, Threads: 112, MaxSpeedMHz: 3800}
	cpu1, cpu2 := cpu, cpu
	cpu1.Socket, cpu2.Socket = "CPU 1", "CPU 2"
	want := proto.OOBInventory{
		System: proto.OOBSystem{
			Manufacturer: redfishsim.Manufacturer,
			Model:        redfishsim.Model,
			SerialNumber: redfishsim.SerialNumber,
			UUID:         redfishsim.UUID,
			BIOSVersion:  redfishsim.BIOSVersion,
		},
		PowerState: proto.PowerStateOn,
		CPUs:       []proto.OOBCPU{cpu1, cpu2},
		Memory: proto.OOBMemory{TotalBytes: redfishsim.MemoryGiB << 30, Modules: []proto.OOBMemoryModule{
			{Locator: "A1", CapacityBytes: redfishsim.DIMMCapacityMiB << 20, Type: "DDR5", SpeedMHz: 4800},
			{Locator: "B1", CapacityBytes: redfishsim.DIMMCapacityMiB << 20, Type: "DDR5", SpeedMHz: 4800},
		}},
		NICs: []proto.OOBNIC{
			{Name: "NIC.Integrated.1-1", MAC: "b4:96:91:0a:1b:2c", SpeedMbps: 25000},
			{Name: "NIC.Slot.3-1", MAC: "0c:42:a1:3d:4e:5f", SpeedMbps: 400000},
		},
		Storage: []proto.OOBDrive{{Name: "NVMe 0", Model: "PM1743", SerialNumber: "S6CUNA0T100001", CapacityBytes: 3840755982336, MediaType: "SSD", Protocol: "NVMe"}},
		BMC:     proto.OOBController{Model: redfishsim.BMCModel, FirmwareVersion: redfishsim.BMCFirmware},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("inventory (-want +got):\n%s", diff)
	}
}
