package hostunit

import "github.com/better-compute/better-compute/jsondoc"

// FabricManager runs the NVIDIA fabric manager that NVSwitch systems need. It has no
// settings but when (typically "nvswitch").
type FabricManager struct {
	Common
}

// Unit returns "fabric-manager".
func (*FabricManager) Unit() string { return UnitFabricManager }

func checkFabricManager(c checker, v *jsondoc.Value, p jsondoc.Path) {
	c.fields(v, p, map[string]jsondoc.Check{})
}
