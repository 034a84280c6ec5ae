package inventory

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	gocmp "github.com/google/go-cmp/cmp"
)

func recorded(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseNvidiaSMI(t *testing.T) {
	got, err := ParseNvidiaSMI(recorded(t, "nvidia-smi-rtx4090.xml"))
	if err != nil {
		t.Fatal(err)
	}
	want := SMI{DriverVersion: "535.86.05", GPUs: []SMIGPU{{PCIAddress: "0000:84:00.0", Name: "NVIDIA GeForce RTX 4090",
		UUID: "GPU-71d1acc2-662d-2166-bf9f-65272d2fc437", MemoryMiB: 24564}}}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for name, doc := range map[string]string{
		"not XML":      "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
		"another root": `<other><gpu id="00000000:84:00.0"/></other>`,
		"no bus id":    `<nvidia_smi_log><gpu id="GPU 0"><product_name>x</product_name></gpu></nvidia_smi_log>`,
	} {
		if _, err := ParseNvidiaSMI([]byte(doc)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestParseNVLinkStatus(t *testing.T) {
	got, err := ParseNVLinkStatus(recorded(t, "nvlink-status-h100.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"GPU-5a10e6e5-95f7-2785-ed63-6f6147f304f7": 18, "GPU-abcdefab-cdef-abdc-abcd-abababababab": 2}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got, err := ParseNVLinkStatus(nil); err != nil || len(got) != 0 {
		t.Errorf("no NVLink (a machine without any prints nothing): %v %v", got, err)
	}
	for _, doc := range []string{"Link 0: 26.562 GB/s\n", "GPU 0: NVIDIA H100\n", "Failed to initialize NVML: Driver/library version mismatch\n"} {
		if _, err := ParseNVLinkStatus([]byte(doc)); err == nil {
			t.Errorf("%q parsed", doc)
		}
	}
}

// With nvidia-smi on the machine (a stand-in printing recorded outputs), the GPUs found
// on PCI get its name, UUID, driver, memory and NVLinks; without it they stay as PCI
// shows them.
func TestReaderAddsNvidiaSMI(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/cpuinfo": cpuinfo,
		"proc/meminfo": "MemTotal: 1024 kB\n",
		"sys/bus/pci/devices/0000:84:00.0/vendor": "0x10de\n",
		"sys/bus/pci/devices/0000:84:00.0/device": "0x2684\n",
		"sys/bus/pci/devices/0000:84:00.0/class":  "0x030000\n",
	})
	xmlPath, _ := filepath.Abs("testdata/nvidia-smi-rtx4090.xml")
	smi := filepath.Join(t.TempDir(), "nvidia-smi")
	script := "#!/bin/sh\ncase \"$1\" in\n-q) cat " + xmlPath + ";;\nnvlink) printf 'GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-71d1acc2-662d-2166-bf9f-65272d2fc437)\\n\\t Link 0: 14.062 GB/s\\n';;\nesac\n"
	if err := os.WriteFile(smi, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	hw, err := Reader{Root: root, NvidiaSMI: smi}.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []proto.GPUInfo{{PCIAddress: "0000:84:00.0", Vendor: "10de", Device: "2684", Name: "NVIDIA GeForce RTX 4090",
		UUID: "GPU-71d1acc2-662d-2166-bf9f-65272d2fc437", DriverVersion: "535.86.05", MemoryMiB: 24564, NVLinks: 1}}
	if diff := gocmp.Diff(want, hw.GPUs); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	hw, err = Reader{Root: root, NvidiaSMI: filepath.Join(t.TempDir(), "missing")}.Read(t.Context())
	if err != nil || hw.GPUs[0].Name != "" || hw.GPUs[0].Device != "2684" {
		t.Errorf("without nvidia-smi: %+v %v", hw.GPUs, err)
	}
}

// TestReaderBoundsNvidiaSMI: nvidia-smi is the machine's, and what it prints is kept up
// to 16 MiB (its XML of 8 GPUs is about 100 KiB); past that it is stopped and the GPUs
// stay as PCI shows them. Before, a stand-in printing 64 MiB had all of it read into
// memory (twice over as the buffer grew), and one printing without end grew the agent
// until its minute ran out.
func TestReaderBoundsNvidiaSMI(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/cpuinfo": cpuinfo,
		"proc/meminfo": "MemTotal: 1024 kB\n",
		"sys/bus/pci/devices/0000:84:00.0/vendor": "0x10de\n",
		"sys/bus/pci/devices/0000:84:00.0/device": "0x2684\n",
		"sys/bus/pci/devices/0000:84:00.0/class":  "0x030000\n",
	})
	smi := filepath.Join(t.TempDir(), "nvidia-smi")
	if err := os.WriteFile(smi, []byte("#!/bin/sh\nexec head -c 67108864 /dev/zero\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	hw, err := Reader{Root: root, NvidiaSMI: smi}.Read(t.Context())
	runtime.ReadMemStats(&after)
	if err != nil || len(hw.GPUs) != 1 || hw.GPUs[0].Name != "" || hw.GPUs[0].Device != "2684" {
		t.Errorf("%+v %v", hw.GPUs, err)
	}
	// Read whole, 384 MiB of allocations; bounded, 16 MiB kept and up to 80 MiB under the
	// race detector, whose sync.Pool drops pooled buffers at random.
	if n := after.TotalAlloc - before.TotalAlloc; n > 160<<20 {
		t.Errorf("reading nvidia-smi's 64 MiB allocated %d MiB", n>>20)
	}
}

// inventory.refresh refuses a machine whose product UUID is not the enrolled one, and
// reports nothing then.
func TestCommandChecksIdentity(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/cpuinfo":                  cpuinfo,
		"proc/meminfo":                  "MemTotal: 1024 kB\n",
		"sys/class/dmi/id/product_uuid": "4c4c4544-0035-4410-8052-b2c04f4a4d32\n",
	})
	reported := map[string]json.RawMessage{}
	report := func(name string, data json.RawMessage) { reported[name] = data }
	_, err := Reader{Root: root}.Command(t.Context(), json.RawMessage(`{"productUuid": "11111111-2222-3333-4444-555555555555"}`), report)
	if proto.CodeOf(err) != proto.DriverError || len(reported) != 0 {
		t.Fatalf("another machine: %v, reported %d sections", err, len(reported))
	}
	out, err := Reader{Root: root}.Command(t.Context(), json.RawMessage(`{"productUuid": "4C4C4544-0035-4410-8052-B2C04F4A4D32"}`), report)
	if err != nil {
		t.Fatal(err)
	}
	if len(reported) != 6 || !strings.Contains(string(out), `"count":3`) {
		t.Errorf("reported %d sections, answered %s", len(reported), out)
	}
}

// The agent's Enrich sees every read, before nvidia-smi's part (the ramdisk adds each
// disk's firmware erase capabilities there).
func TestReaderEnrich(t *testing.T) {
	root := tree(t, map[string]string{"sys/block/sda/size": "8\n", "sys/block/sda/device/model": "x\n"})
	hw, err := Reader{Root: root, Enrich: func(hw *proto.HardwareInventory) {
		hw.Disks[0].Erase.Firmware = &proto.FirmwareErase{ATASecurityErase: true}
	}}.Read(t.Context())
	if err != nil || len(hw.Disks) != 1 || hw.Disks[0].Erase.Firmware == nil || !hw.Disks[0].Erase.Firmware.ATASecurityErase {
		t.Fatalf("%+v %v", hw.Disks, err)
	}
}
