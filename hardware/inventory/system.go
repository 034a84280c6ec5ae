package inventory

import (
	"path/filepath"

	"github.com/better-compute/better-compute/proto"
)

// System reads the `system` section from the SMBIOS attributes the kernel exposes.
func System(root string) proto.SystemInfo {
	dmi := filepath.Join(root, "sys/class/dmi/id")
	return proto.SystemInfo{
		ProductUUID: text(dmi, "product_uuid"),
		Vendor:      text(dmi, "sys_vendor"),
		Product:     text(dmi, "product_name"),
		Serial:      text(dmi, "product_serial"),
		BIOSVendor:  text(dmi, "bios_vendor"),
		BIOSVersion: text(dmi, "bios_version"),
		BIOSDate:    text(dmi, "bios_date"),
	}
}
