package inventory

import (
	"path/filepath"

	"github.com/better-compute/better-compute/proto"
)

// Disks reads the `disks` section: every block device backed by hardware (loop, RAM,
// device-mapper and other virtual devices have no device link), sorted by name.
func Disks(root string) ([]proto.DiskInfo, error) {
	dir := filepath.Join(root, "sys/block")
	names, err := entries(dir)
	if err != nil {
		return nil, err
	}
	disks := []proto.DiskInfo{}
	for _, name := range names {
		if !exists(dir, name, "device") {
			continue
		}
		disks = append(disks, proto.DiskInfo{
			Name: name,
			// size is in 512-byte sectors whatever the device's own sector size.
			SizeBytes:  number(dir, name, "size") * 512,
			Rotational: text(dir, name, "queue", "rotational") == "1",
			Model:      text(dir, name, "device", "model"),
			Serial:     serial(filepath.Join(dir, name)),
		})
	}
	return disks, nil
}

// serial is a disk's serial number where the kernel exposes one: NVMe and virtio
// devices in their device directory or the disk's own.
func serial(disk string) string {
	if s := text(disk, "device", "serial"); s != "" {
		return s
	}
	return text(disk, "serial")
}
