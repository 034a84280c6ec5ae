package hostunit

import "github.com/better-compute/better-compute/jsondoc"

// IOMMU sets the IOMMU mode on the kernel command line; it takes effect after a reboot.
type IOMMU struct {
	Common
	// Passthrough maps devices one to one (iommu=pt), the mode GPUs and RDMA NICs run
	// fastest in. Default true.
	Passthrough bool `json:"passthrough"`
}

// Unit returns "iommu".
func (*IOMMU) Unit() string { return UnitIOMMU }

func checkIOMMU(c checker, v *jsondoc.Value, p jsondoc.Path) {
	c.fields(v, p, map[string]jsondoc.Check{"passthrough": c.bool})
}
