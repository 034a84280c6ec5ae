package hostunit

import "github.com/better-compute/better-compute/jsondoc"

// ContainerToolkit installs the NVIDIA container toolkit so containers can use the GPUs.
type ContainerToolkit struct {
	Common
	// CDI generates Container Device Interface specs for the GPUs. Default true.
	CDI bool `json:"cdi"`
}

// Unit returns "container-toolkit".
func (*ContainerToolkit) Unit() string { return UnitContainerToolkit }

func checkContainerToolkit(c checker, v *jsondoc.Value, p jsondoc.Path) {
	c.fields(v, p, map[string]jsondoc.Check{"cdi": c.bool})
}
