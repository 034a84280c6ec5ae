package redfish

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

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

// TestInspectBoundsWhatTheBMCSays: a BMC that describes its machine with strings of a
// MiB (or of characters cut in half by any bound), sizes no machine has (1e300 GiB of
// memory, DIMMs past what int64 holds, negative drives) and negative counts and speeds
// gives an inventory with every string within maxInventoryText and valid UTF-8, and
// each impossible number dropped (0, as a number the BMC does not give): what reaches
// the step's result, the store and the operator stays small and true, and the result
// fits in what the registry takes of a step's result.
func TestInspectBoundsWhatTheBMCSays(t *testing.T) {
	const system = "/redfish/v1/Systems/1"
	huge := strings.Repeat("a", 1<<20)
	halves := "a" + strings.Repeat("é", maxInventoryText) // two bytes each after the first: a cut at an even length splits one
	sim := newSim(t, redfishsim.Config{PowerState: "On"})
	d := open(t, config(t, sim))
	answer := func(path string, body map[string]any) {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		sim.Answer(path, http.StatusOK, b)
	}
	link := func(path string) map[string]any { return map[string]any{"@odata.id": path} }
	answer(system, map[string]any{"@odata.id": system, "Id": "1", "Name": "System", "PowerState": "On",
		"Manufacturer": huge, "Model": halves, "SerialNumber": huge, "UUID": huge, "BiosVersion": huge,
		"MemorySummary": map[string]any{"TotalSystemMemoryGiB": 1e300},
		"Processors":    link(system + "/Processors"), "Memory": link(system + "/Memory"),
		"EthernetInterfaces": link(system + "/EthernetInterfaces"), "Storage": link(system + "/Storage"),
		"Links": map[string]any{"ManagedBy": []any{link("/redfish/v1/Managers/1")}}})
	answer(system+"/Processors/CPU1", map[string]any{"@odata.id": system + "/Processors/CPU1", "Id": "CPU1", "ProcessorType": "CPU",
		"Socket": huge, "Manufacturer": huge, "Model": huge, "TotalCores": -56, "TotalThreads": 1 << 62, "MaxSpeedMHz": -1})
	answer(system+"/Memory/DIMM_A1", map[string]any{"@odata.id": system + "/Memory/DIMM_A1", "Id": "DIMM_A1",
		"DeviceLocator": huge, "CapacityMiB": 1<<53 + 1, "MemoryDeviceType": huge, "OperatingSpeedMhz": -4800})
	answer(system+"/Memory/DIMM_B1", map[string]any{"@odata.id": system + "/Memory/DIMM_B1", "Id": "DIMM_B1", "DeviceLocator": "B1", "CapacityMiB": -1})
	answer(system+"/EthernetInterfaces/NIC.Integrated.1-1", map[string]any{"@odata.id": system + "/EthernetInterfaces/NIC.Integrated.1-1",
		"Id": huge, "MACAddress": huge, "SpeedMbps": -25000})
	answer(system+"/Storage/1/Drives/Disk.0", map[string]any{"@odata.id": system + "/Storage/1/Drives/Disk.0", "Id": "Disk.0",
		"Name": huge, "Model": huge, "SerialNumber": huge, "CapacityBytes": -3840755982336, "MediaType": huge, "Protocol": huge})
	answer("/redfish/v1/Managers/1", map[string]any{"@odata.id": "/redfish/v1/Managers/1", "Id": "1", "ManagerType": "BMC", "Model": huge, "FirmwareVersion": huge})
	inv, err := d.Inspect(context.Background())
	if err != nil || len(inv.Unread) > 0 {
		t.Fatalf("%v, unread %+v", err, inv.Unread)
	}
	strs := map[string]string{"system.manufacturer": inv.System.Manufacturer, "system.model": inv.System.Model,
		"system.serialNumber": inv.System.SerialNumber, "system.uuid": inv.System.UUID, "system.biosVersion": inv.System.BIOSVersion,
		"bmc.model": inv.BMC.Model, "bmc.firmwareVersion": inv.BMC.FirmwareVersion}
	for i, c := range inv.CPUs {
		strs[fmt.Sprintf("cpus[%d].socket", i)], strs[fmt.Sprintf("cpus[%d].manufacturer", i)], strs[fmt.Sprintf("cpus[%d].model", i)] = c.Socket, c.Manufacturer, c.Model
	}
	for i, m := range inv.Memory.Modules {
		strs[fmt.Sprintf("memory.modules[%d].locator", i)], strs[fmt.Sprintf("memory.modules[%d].type", i)] = m.Locator, m.Type
	}
	for i, n := range inv.NICs {
		strs[fmt.Sprintf("nics[%d].name", i)], strs[fmt.Sprintf("nics[%d].mac", i)] = n.Name, n.MAC
	}
	for i, s := range inv.Storage {
		for field, v := range map[string]string{"name": s.Name, "model": s.Model, "serialNumber": s.SerialNumber, "mediaType": s.MediaType, "protocol": s.Protocol} {
			strs[fmt.Sprintf("storage[%d].%s", i, field)] = v
		}
	}
	for path, s := range strs {
		if len(s) > maxInventoryText+len("...") || !utf8.ValidString(s) {
			t.Errorf("%s: %d bytes (valid UTF-8: %v); want at most %d and valid", path, len(s), utf8.ValidString(s), maxInventoryText)
		}
	}
	if got := inv.System.Model; !strings.HasPrefix(halves, strings.TrimSuffix(got, "...")) || got == "" {
		t.Errorf("system.model %q: want the start of what the BMC said", got)
	}
	if len(inv.CPUs) != 2 || len(inv.Memory.Modules) != 2 || len(inv.NICs) != 2 || len(inv.Storage) != 1 {
		t.Fatalf("%d CPUs, %d DIMMs, %d NICs, %d drives; want 2, 2, 2, 1", len(inv.CPUs), len(inv.Memory.Modules), len(inv.NICs), len(inv.Storage))
	}
	cpu, dimmA, dimmB := inv.CPUs[0], inv.Memory.Modules[0], inv.Memory.Modules[1]
	for path, n := range map[string]int64{"memory.totalBytes": inv.Memory.TotalBytes,
		"cpus[0].cores": int64(cpu.Cores), "cpus[0].threads": int64(cpu.Threads), "cpus[0].maxSpeedMHz": int64(cpu.MaxSpeedMHz),
		"memory.modules[0].capacityBytes": dimmA.CapacityBytes, "memory.modules[0].speedMHz": int64(dimmA.SpeedMHz),
		"memory.modules[1].capacityBytes": dimmB.CapacityBytes, "nics[0].speedMbps": int64(inv.NICs[0].SpeedMbps),
		"storage[0].capacityBytes": inv.Storage[0].CapacityBytes,
	} {
		if n != 0 {
			t.Errorf("%s: %d, want 0: the BMC's number is no machine's", path, n)
		}
	}
	if c := inv.CPUs[1]; c.Cores != 56 || c.Threads != 112 || inv.NICs[1].SpeedMbps != 400000 {
		t.Errorf("the parts the BMC describes as a machine has them: %+v, %+v; want them kept", c, inv.NICs[1])
	}
	if b, err := json.Marshal(inv); err != nil || len(b) > proto.MaxStepResult {
		t.Errorf("the result is %d bytes (%v); the registry takes at most %d", len(b), err, proto.MaxStepResult)
	}
}
