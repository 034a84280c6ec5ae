package inventory

import (
	"path/filepath"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// nvidiaVendor is NVIDIA's PCI vendor id.
const nvidiaVendor = "0x10de"

// GPUs reads the `gpus` section: NVIDIA PCI functions of class VGA (0x0300) or 3D
// controller (0x0302), sorted by address. Audio and bridge functions of the same cards
// have other classes and are left out.
func GPUs(root string) ([]proto.GPUInfo, error) {
	dir := filepath.Join(root, "sys/bus/pci/devices")
	addrs, err := entries(dir)
	if err != nil {
		return nil, err
	}
	gpus := []proto.GPUInfo{}
	for _, addr := range addrs {
		if text(dir, addr, "vendor") != nvidiaVendor {
			continue
		}
		class := text(dir, addr, "class")
		if !strings.HasPrefix(class, "0x0300") && !strings.HasPrefix(class, "0x0302") {
			continue
		}
		gpus = append(gpus, proto.GPUInfo{
			PCIAddress: addr,
			Vendor:     strings.TrimPrefix(nvidiaVendor, "0x"),
			Device:     strings.TrimPrefix(text(dir, addr, "device"), "0x"),
		})
	}
	return gpus, nil
}
