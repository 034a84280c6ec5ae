package inventory

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The inventory's parsers read what the machine says of itself: a ramdisk runs on
// hardware nobody vouched for yet, so whatever its firmware, kernel and nvidia-smi
// print, they answer an error or values that make sense.

func FuzzParseCPUInfo(f *testing.F) {
	f.Add([]byte(cpuinfo))
	f.Add([]byte("processor: 0\nphysical id: 0\ncpu cores: -4\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCPUInfo(bytes.NewReader(b))
		if err != nil {
			return
		}
		if c.Count < 0 || c.Sockets < 0 || c.Cores < 0 || c.Sockets > c.Count && c.Count > 0 {
			t.Fatalf("%+v", c)
		}
	})
}

func FuzzParseMemInfo(f *testing.F) {
	f.Add([]byte("MemTotal:       2113427456 kB\nMemFree:        2000000000 kB\n"))
	f.Add([]byte("MemTotal: 9223372036854775807 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMemInfo(bytes.NewReader(b))
		if err == nil && m.TotalBytes < 0 {
			t.Fatalf("%+v", m)
		}
	})
}

func FuzzParseNvidiaSMI(f *testing.F) {
	f.Add(recorded(f, "nvidia-smi-rtx4090.xml"))
	f.Add([]byte(`<nvidia_smi_log><gpu id="00000001:84:00.0"><fb_memory_usage><total>-3 MiB</total></fb_memory_usage></gpu></nvidia_smi_log>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		smi, err := ParseNvidiaSMI(b)
		if err != nil {
			return
		}
		for _, g := range smi.GPUs {
			if !isPCIAddress(g.PCIAddress) || g.MemoryMiB < 0 {
				t.Fatalf("%+v", g)
			}
		}
	})
}

func FuzzParseNVLinkStatus(f *testing.F) {
	f.Add(recorded(f, "nvlink-status-h100.txt"))
	f.Fuzz(func(t *testing.T, b []byte) {
		links, err := ParseNVLinkStatus(b)
		if err != nil {
			return
		}
		for uuid, n := range links {
			if uuid == "" || n < 0 {
				t.Fatalf("%q: %d", uuid, n)
			}
		}
	})
}

// FuzzSysfs writes fuzzed values into the DMI, block, network and PCI attributes of a
// sysfs tree and reads it.
func FuzzSysfs(f *testing.F) {
	f.Add("4c4c4544-0035-4410-8052-b2c04f4a4d32\n", "7501476528\n", "25000\n", "0x10de\n", "0x030200\n", "../devices/pci0000:00/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/block/sda")
	f.Add("", "-1", "-1", "0x10de", "", "")
	f.Add("\x00", "36028797018963968", "99999999999999999999", "10de", "0x0302", "nvme/usb1/virtio2/end_device-1")
	// One tree for every input: each writes the same files over the last one's.
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, uuid, size, speed, vendor, class, link string) {
		for path, v := range map[string]string{
			"sys/class/dmi/id/product_uuid":           uuid,
			"sys/block/sda/size":                      size,
			"sys/block/sda/device/model":              uuid,
			"sys/class/net/eth0/speed":                speed,
			"sys/class/net/eth0/address":              uuid,
			"sys/class/net/eth0/device/vendor":        vendor,
			"sys/bus/pci/devices/0000:17:00.0/vendor": vendor,
			"sys/bus/pci/devices/0000:17:00.0/class":  class,
			"proc/cpuinfo":                            cpuinfo,
			"proc/meminfo":                            size,
		} {
			p := filepath.Join(root, path)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		hw, err := Read(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range hw.Disks {
			if d.SizeBytes < 0 {
				t.Fatalf("%+v", d)
			}
		}
		for _, n := range hw.NICs {
			if n.SpeedMbps < 0 {
				t.Fatalf("%+v", n)
			}
		}
		if tr := TransportOf(link); tr != "" && tr != "nvme" && tr != "sata" && tr != "sas" && tr != "virtio" && tr != "usb" && tr != "mmc" && tr != "scsi" {
			t.Fatalf("transport %q", tr)
		}
	})
}
