package inventory

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// NICs reads the `nics` section: every interface backed by a device (loopback,
// bridges and other virtual interfaces have none), sorted by name.
func NICs(root string) ([]proto.NICInfo, error) {
	dir := filepath.Join(root, "sys/class/net")
	names, err := devices(dir)
	if err != nil {
		return nil, err
	}
	nics := []proto.NICInfo{}
	for _, name := range names {
		nic := proto.NICInfo{Name: name, MAC: strings.ToLower(text(dir, name, "address")), Link: text(dir, name, "operstate")}
		if target, err := os.Readlink(filepath.Join(dir, name, "device", "driver")); err == nil {
			nic.Driver = filepath.Base(target)
		}
		if target, err := os.Readlink(filepath.Join(dir, name, "device")); err == nil && isPCIAddress(filepath.Base(target)) {
			nic.PCIAddress = filepath.Base(target)
		}
		// speed is -1, or unreadable, while the link is down.
		if s := number(dir, name, "speed"); s > 0 {
			nic.SpeedMbps = int(s)
		}
		nics = append(nics, nic)
	}
	return nics, nil
}

// isPCIAddress reports whether s is domain:bus:device.function, 0000:17:00.0.
func isPCIAddress(s string) bool {
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return false
	}
	for i, c := range s {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}
