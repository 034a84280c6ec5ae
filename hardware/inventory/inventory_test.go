package inventory

import (
	"cmp"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	gocmp "github.com/google/go-cmp/cmp"
)

func linkRank(content string) int {
	if strings.HasPrefix(content, "->") {
		return 1
	}
	return 0
}

// tree builds a machine's sysfs and procfs under a temporary root: files with their
// contents, and symlinks (a value starting with "->").
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	paths := slices.Sorted(maps.Keys(files))
	// Files first, then the links, which may point at their directories.
	slices.SortStableFunc(paths, func(a, b string) int {
		return cmp.Compare(linkRank(files[a]), linkRank(files[b]))
	})
	for _, path := range paths {
		content := files[path]
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const cpuinfo = `processor	: 0
vendor_id	: AuthenticAMD
model name	: AMD EPYC 9554 64-Core Processor
physical id	: 0
cpu cores	: 64
flags		: fpu vme

processor	: 1
vendor_id	: AuthenticAMD
model name	: AMD EPYC 9554 64-Core Processor
physical id	: 1
cpu cores	: 64

processor	: 2
vendor_id	: AuthenticAMD
model name	: AMD EPYC 9554 64-Core Processor
physical id	: 1
cpu cores	: 64
`

func TestRead(t *testing.T) {
	root := tree(t, map[string]string{
		"sys/class/dmi/id/product_uuid":   "4c4c4544-0035-4410-8052-b2c04f4a4d32\n",
		"sys/class/dmi/id/sys_vendor":     "Dell Inc.\n",
		"sys/class/dmi/id/product_name":   "PowerEdge XE9680\n",
		"sys/class/dmi/id/product_serial": "5D4JMZ2\n",
		"sys/class/dmi/id/bios_vendor":    "Dell Inc.\n",
		"sys/class/dmi/id/bios_version":   "2.3.5\n",
		"sys/class/dmi/id/bios_date":      "09/12/2025\n",

		"sys/class/net/lo/address":                                "00:00:00:00:00:00\n",
		"sys/class/net/eno1/address":                              "3C:EC:EF:00:00:01\n",
		"sys/class/net/eno1/speed":                                "25000\n",
		"sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0/driver": "->../../../../bus/pci/drivers/mlx5_core",
		"sys/class/net/eno1/device":                               "->../../../devices/pci0000:16/0000:16:01.0/0000:17:00.0",
		"sys/class/net/eno1/operstate":                            "up\n",
		"sys/class/net/eno2/address":                              "3c:ec:ef:00:00:02\n",
		"sys/class/net/eno2/speed":                                "-1\n",
		"sys/class/net/eno2/device/vendor":                        "0x15b3\n",
		"sys/class/net/eno2/operstate":                            "down\n",
		"sys/class/net/br0/address":                               "3c:ec:ef:00:00:01\n",

		"sys/devices/pci0000:00/0000:00:01.0/nvme/nvme0/nvme0n1/size":                                   "7501476528\n",
		"sys/devices/pci0000:00/0000:00:01.0/nvme/nvme0/nvme0n1/queue/rotational":                       "0\n",
		"sys/devices/pci0000:00/0000:00:01.0/nvme/nvme0/nvme0n1/queue/discard_max_bytes":                "2199023255040\n",
		"sys/devices/pci0000:00/0000:00:01.0/nvme/nvme0/nvme0n1/queue/write_zeroes_max_bytes":           "0\n",
		"sys/devices/pci0000:00/0000:00:01.0/nvme/nvme0/nvme0n1/device/model":                           "SAMSUNG MZQL27T6HBLA-00A07   \n",
		"sys/devices/pci0000:00/0000:00:01.0/nvme/nvme0/nvme0n1/device/serial":                          "S6CKNT0W700123\n",
		"sys/devices/pci0000:00/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/block/sda/size":             "3907029168\n",
		"sys/devices/pci0000:00/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/block/sda/queue/rotational": "1\n",
		"sys/devices/pci0000:00/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/block/sda/device/model":     "ST2000NM000A\n",
		"sys/devices/pci0000:00/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/block/sda/ro":               "1\n",
		"sys/block/nvme0n1":    "->../devices/pci0000:00/0000:00:01.0/nvme/nvme0/nvme0n1",
		"sys/block/sda":        "->../devices/pci0000:00/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/block/sda",
		"sys/block/loop0/size": "0\n",

		"proc/cpuinfo": cpuinfo,
		"proc/meminfo": "MemTotal:       2113427456 kB\nMemFree:        2000000000 kB\n",

		"sys/bus/pci/devices/0000:17:00.0/vendor": "0x10de\n",
		"sys/bus/pci/devices/0000:17:00.0/device": "0x2330\n",
		"sys/bus/pci/devices/0000:17:00.0/class":  "0x030200\n",
		"sys/bus/pci/devices/0000:17:00.1/vendor": "0x10de\n",
		"sys/bus/pci/devices/0000:17:00.1/device": "0x22a3\n",
		"sys/bus/pci/devices/0000:17:00.1/class":  "0x068000\n",
		"sys/bus/pci/devices/0000:03:00.0/vendor": "0x102b\n",
		"sys/bus/pci/devices/0000:03:00.0/device": "0x0536\n",
		"sys/bus/pci/devices/0000:03:00.0/class":  "0x030000\n",
		"sys/bus/pci/devices/0000:c1:00.0/vendor": "0x10de\n",
		"sys/bus/pci/devices/0000:c1:00.0/device": "0x2684\n",
		"sys/bus/pci/devices/0000:c1:00.0/class":  "0x030000\n",
	})
	got, err := Read(root)
	if err != nil {
		t.Fatal(err)
	}
	want := proto.HardwareInventory{
		System: proto.SystemInfo{ProductUUID: "4c4c4544-0035-4410-8052-b2c04f4a4d32", Vendor: "Dell Inc.", Product: "PowerEdge XE9680", Serial: "5D4JMZ2",
			BIOSVendor: "Dell Inc.", BIOSVersion: "2.3.5", BIOSDate: "09/12/2025"},
		NICs: []proto.NICInfo{
			{Name: "eno1", MAC: "3c:ec:ef:00:00:01", Driver: "mlx5_core", PCIAddress: "0000:17:00.0", Link: "up", SpeedMbps: 25000},
			{Name: "eno2", MAC: "3c:ec:ef:00:00:02", Link: "down"},
		},
		Disks: []proto.DiskInfo{
			{Name: "nvme0n1", SizeBytes: 7501476528 * 512, Model: "SAMSUNG MZQL27T6HBLA-00A07", Serial: "S6CKNT0W700123",
				Transport: "nvme", Erase: proto.DiskErase{Discard: true}},
			{Name: "sda", SizeBytes: 3907029168 * 512, Rotational: true, Model: "ST2000NM000A", Transport: "sata", ReadOnly: true},
		},
		CPU:    proto.CPUInfo{Model: "AMD EPYC 9554 64-Core Processor", Count: 3, Sockets: 2, Cores: 128},
		Memory: proto.MemoryInfo{TotalBytes: 2113427456 * 1024},
		GPUs: []proto.GPUInfo{
			{PCIAddress: "0000:17:00.0", Vendor: "10de", Device: "2330"},
			{PCIAddress: "0000:c1:00.0", Vendor: "10de", Device: "2684"},
		},
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("inventory (-want +got):\n%s", diff)
	}
}

func TestReadThisMachine(t *testing.T) {
	inv, err := Read("/")
	if err != nil {
		t.Fatal(err)
	}
	if inv.CPU.Count == 0 || inv.Memory.TotalBytes == 0 {
		t.Errorf("this machine has %d CPUs and %d bytes of memory", inv.CPU.Count, inv.Memory.TotalBytes)
	}
}

// A root without procfs (a chroot, a container) reads as no CPU and no memory, not as
// an error: the agents start on whatever the machine shows.
func TestReadWithoutProc(t *testing.T) {
	hw, err := Read(t.TempDir())
	if err != nil || hw.CPU.Count != 0 || hw.Memory.TotalBytes != 0 {
		t.Fatalf("%+v %v", hw, err)
	}
}

// TestDiskTransport: a disk's transport is the bus its sysfs path passes, except that a
// disk on a SAS or SCSI host answering as an ATA device is sata, as disk.wipe reaches
// it with ATA commands (the inventory said sas where the wipe said sata).
func TestDiskTransport(t *testing.T) {
	sas := "pci0000:00/0000:00:03.0/0000:02:00.0/host0/port-0:0/expander-0:0/port-0:0:1/end_device-0:0:1/target0:0:1/0:0:1:0/block/"
	files := map[string]string{}
	disk := func(name, path, vendor string) {
		files["sys/devices/"+path+name+"/size"] = "2048\n"
		files["sys/devices/"+path+name+"/device/vendor"] = vendor
		files["sys/block/"+name] = "->../devices/" + path + name
	}
	disk("sda", sas, "ATA     \n")
	disk("sdb", sas, "SEAGATE \n")
	disk("sdc", "pci0000:00/0000:00:05.0/virtio2/host3/target3:0:0/3:0:0:0/block/", "QEMU    \n")
	disk("sdd", "pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/host4/target4:0:0/4:0:0:0/block/", "ATA     \n")
	disks, err := Disks(tree(t, files))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range disks {
		got[d.Name] = d.Transport
	}
	want := map[string]string{"sda": "sata", "sdb": "sas", "sdc": "virtio", "sdd": "usb"}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("transports (-want +got):\n%s", diff)
	}
}

// TestMultipathNVMePathsAreNoDisks: a multipath NVMe namespace (a controller in an NVM
// subsystem that claims several controllers, as dual-port drives and qemu's nvme-subsys
// do) is one disk, its head device; the kernel's hidden per-controller path has no device
// node, and listed it was a disk disk.wipe could not open (`open /dev/nvme0c0n1: no such
// file or directory`, so no wipe was attested) and the largest disk a deploy wrote.
func TestMultipathNVMePathsAreNoDisks(t *testing.T) {
	head := "virtual/nvme-subsystem/nvme-subsys0/nvme0n1"
	path := "pci0000:00/0000:00:04.0/nvme/nvme0/nvme0c0n1"
	disks, err := Disks(tree(t, map[string]string{
		"sys/devices/" + head + "/size":   "131072\n",
		"sys/devices/" + head + "/hidden": "0\n",
		"sys/devices/" + head + "/device": "->../../nvme-subsys0",
		"sys/block/nvme0n1":               "->../devices/" + head,
		"sys/devices/" + path + "/size":   "131072\n",
		"sys/devices/" + path + "/hidden": "1\n",
		"sys/devices/" + path + "/device": "->../../nvme0",
		"sys/block/nvme0c0n1":             "->../devices/" + path,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(disks) != 1 || disks[0].Name != "nvme0n1" || disks[0].Transport != "nvme" || disks[0].SizeBytes != 64<<20 {
		t.Errorf("disks %+v, want the head nvme0n1 alone", disks)
	}
}
