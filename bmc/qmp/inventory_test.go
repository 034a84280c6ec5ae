package qmp

import (
	"context"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestInspectVM(t *testing.T) {
	const uuid = "2f6c1e0a-4b8d-4e3a-9c1f-5d7e8a9b0c1d"
	v := startVM(t, "-uuid", uuid, "-smp", "4,sockets=2,cores=2,threads=1")
	d := v.open(t, v.config())
	got, err := d.Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.System.Model, "pc-q35") || got.BMC.FirmwareVersion == "" {
		t.Errorf("model %q, firmware %q: want a q35 machine type and qemu's version", got.System.Model, got.BMC.FirmwareVersion)
	}
	got.System.Model, got.BMC.FirmwareVersion = "", ""
	want := proto.OOBInventory{
		System:     proto.OOBSystem{Manufacturer: "QEMU", UUID: uuid},
		PowerState: proto.PowerStateOff,
		CPUs: []proto.OOBCPU{
			{Socket: "0", Model: "x86_64", Cores: 2, Threads: 2},
			{Socket: "1", Model: "x86_64", Cores: 2, Threads: 2},
		},
		Memory:  proto.OOBMemory{TotalBytes: 64 << 20},
		NICs:    []proto.OOBNIC{{Name: "nic0", MAC: "52:54:00:aa:bb:cc"}},
		Storage: []proto.OOBDrive{{Name: "disk0", CapacityBytes: 1 << 20}},
		BMC:     proto.OOBController{Model: "QEMU QMP"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("inventory (-want +got):\n%s", diff)
	}
}
