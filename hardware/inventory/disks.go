package inventory

import (
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// Disks reads the `disks` section: every block device backed by hardware (loop, RAM,
// device-mapper and other virtual devices have no device link), sorted by name. A
// multipath NVMe namespace's per-controller paths (nvme0c0n1: hidden, with no device
// node) are not disks: the namespace is its head device (nvme0n1).
func Disks(root string) ([]proto.DiskInfo, error) {
	dir := filepath.Join(root, "sys/block")
	names, err := devices(dir)
	if err != nil {
		return nil, err
	}
	disks := []proto.DiskInfo{}
	for _, name := range names {
		if text(dir, name, "hidden") == "1" {
			continue
		}
		disks = append(disks, proto.DiskInfo{
			Name:       name,
			SizeBytes:  sectors(number(dir, name, "size")),
			Rotational: text(dir, name, "queue", "rotational") == "1",
			Model:      text(dir, name, "device", "model"),
			Serial:     serial(filepath.Join(dir, name)),
			Transport:  transport(filepath.Join(dir, name)),
			Erase: proto.DiskErase{
				Discard:     number(dir, name, "queue", "discard_max_bytes") > 0,
				WriteZeroes: number(dir, name, "queue", "write_zeroes_max_bytes") > 0,
			},
			ReadOnly:  text(dir, name, "ro") == "1",
			Removable: text(dir, name, "removable") == "1",
		})
	}
	return disks, nil
}

// sectors is the bytes of a disk's size attribute, in 512-byte sectors whatever the
// device's own sector size; 0 for a size no disk has.
func sectors(n int64) int64 {
	if n > math.MaxInt64/512 {
		return 0
	}
	return n * 512
}

// serial is a disk's serial number where the kernel exposes one: NVMe and virtio
// devices in their device directory or the disk's own.
func serial(disk string) string {
	if s := text(disk, "device", "serial"); s != "" {
		return s
	}
	return text(disk, "serial")
}

// transport names a disk's bus from the path of its device in sysfs (the block
// directory links into /sys/devices/...): the first bus the path passes, from the
// disk up. A disk behind a SAS or SCSI host that answers as an ATA device (vendor
// "ATA": a SATA disk on a SAS HBA) is sata: its ATA commands reach it through the
// host's translation, and disk.wipe erases it with them.
func transport(disk string) string {
	target, err := os.Readlink(disk)
	if err != nil {
		return ""
	}
	t := TransportOf(target)
	if (t == "sas" || t == "scsi") && text(disk, "device", "vendor") == "ATA" {
		return "sata"
	}
	return t
}

// TransportOf is the bus of a disk whose sysfs device path is path.
func TransportOf(path string) string {
	parts := strings.Split(path, "/")
	for i := len(parts) - 1; i >= 0; i-- {
		p := parts[i]
		switch {
		case strings.HasPrefix(p, "nvme"):
			return "nvme"
		case strings.HasPrefix(p, "virtio"):
			return "virtio"
		case strings.HasPrefix(p, "mmc"):
			return "mmc"
		case strings.HasPrefix(p, "usb"):
			return "usb"
		case strings.HasPrefix(p, "ata"):
			return "sata"
		case strings.HasPrefix(p, "end_device-") || strings.HasPrefix(p, "expander-"):
			return "sas"
		}
	}
	for _, p := range parts {
		if strings.HasPrefix(p, "host") || strings.HasPrefix(p, "target") {
			return "scsi"
		}
	}
	return ""
}
