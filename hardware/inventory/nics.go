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
	names, err := entries(dir)
	if err != nil {
		return nil, err
	}
	nics := []proto.NICInfo{}
	for _, name := range names {
		if !exists(dir, name, "device") {
			continue
		}
		nic := proto.NICInfo{Name: name, MAC: strings.ToLower(text(dir, name, "address"))}
		if target, err := os.Readlink(filepath.Join(dir, name, "device", "driver")); err == nil {
			nic.Driver = filepath.Base(target)
		}
		// speed is -1, or unreadable, while the link is down.
		if s := number(dir, name, "speed"); s > 0 {
			nic.SpeedMbps = int(s)
		}
		nics = append(nics, nic)
	}
	return nics, nil
}
