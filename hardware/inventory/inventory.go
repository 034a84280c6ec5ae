// Package inventory reads the hardware sections `bcd ramdisk` and `bcd node` report for
// inventory.refresh (system, NICs, disks, CPU, memory, GPUs) from sysfs and procfs,
// under a root that tests point at a tree of their own.
package inventory

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// Read reads every section under root ("/" on a machine). A file that is missing or
// unreadable leaves its field empty: firmware and drivers differ in what they expose.
func Read(root string) (proto.HardwareInventory, error) {
	nics, err := NICs(root)
	if err != nil {
		return proto.HardwareInventory{}, err
	}
	disks, err := Disks(root)
	if err != nil {
		return proto.HardwareInventory{}, err
	}
	cpu, err := CPU(root)
	if err != nil {
		return proto.HardwareInventory{}, err
	}
	mem, err := Memory(root)
	if err != nil {
		return proto.HardwareInventory{}, err
	}
	gpus, err := GPUs(root)
	if err != nil {
		return proto.HardwareInventory{}, err
	}
	return proto.HardwareInventory{System: System(root), NICs: nics, Disks: disks, CPU: cpu, Memory: mem, GPUs: gpus}, nil
}

// text is a sysfs attribute's value without surrounding space; empty when absent.
func text(path ...string) string {
	b, err := os.ReadFile(filepath.Join(path...))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// number is a sysfs attribute as an integer; 0 when absent or not a number.
func number(path ...string) int64 {
	v, err := strconv.ParseInt(text(path...), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// entries lists a sysfs class directory's entries, sorted; none when it is missing.
func entries(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(des))
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names, nil
}

// exists reports whether path exists (a symlink counts as itself).
func exists(path ...string) bool {
	_, err := os.Lstat(filepath.Join(path...))
	return err == nil
}
