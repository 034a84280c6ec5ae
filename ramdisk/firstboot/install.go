package firstboot

import (
	"fmt"
	"os"

	"github.com/better-compute/better-compute/ramdisk/gpt"
	"github.com/better-compute/better-compute/ramdisk/mount"
)

// Install finds the partition the files belong on in the written disk, mounts it,
// writes them and unmounts it. It needs root.
func Install(disk *os.File, sectorSize int64, f Files) error {
	if f.Empty() {
		return nil
	}
	parts, err := gpt.Read(disk, sectorSize)
	if err != nil {
		return fmt.Errorf("%w: %v (only GPT disks are supported)", ErrUnsupported, err)
	}
	var part gpt.Partition
	var write func(dir string) error
	switch f.Kind {
	case KindIgnition:
		name := "boot"
		p, ok := gpt.Named(parts, name)
		if !ok {
			name = "OEM"
			if p, ok = gpt.Named(parts, name); !ok {
				return fmt.Errorf("%w: no partition named boot or OEM for the Ignition config", ErrUnsupported)
			}
		}
		part = p
		write = func(dir string) error { return Ignition(dir, name, f) }
	case KindCloudInit, "":
		var ok bool
		if part, ok = gpt.Root(parts); !ok {
			return fmt.Errorf("%w: no root partition found", ErrUnsupported)
		}
		write = func(dir string) error { return CloudInit(dir, f) }
	default:
		return fmt.Errorf("%w: user data of kind %q", ErrUnsupported, f.Kind)
	}
	m, err := mount.Partition(disk, part.Offset, part.Size)
	if err != nil {
		return err
	}
	werr := write(m.Dir)
	if err := m.Unmount(); werr == nil && err != nil {
		werr = fmt.Errorf("unmount partition %d: %w", part.Number, err)
	}
	if werr != nil {
		return werr
	}
	return disk.Sync()
}
