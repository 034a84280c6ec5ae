package hostunit

import "github.com/better-compute/better-compute/jsondoc"

// GPUSharing shares each GPU between several workloads.
type GPUSharing struct {
	Common
	// Mode is mps (CUDA Multi-Process Service) or timeslice.
	Mode string `json:"mode"`
	// Replicas is how many workloads share one GPU, 1 to 48.
	Replicas int `json:"replicas"`
}

// Unit returns "gpu-sharing".
func (*GPUSharing) Unit() string { return UnitGPUSharing }

func checkGPUSharing(c checker, v *jsondoc.Value, p jsondoc.Path) {
	c.fields(v, p, map[string]jsondoc.Check{
		"mode":     func(v *jsondoc.Value, p jsondoc.Path) { c.Enum(v, p, "mps", "timeslice") },
		"replicas": func(v *jsondoc.Value, p jsondoc.Path) { c.Whole(v, p, 1, 48) },
	}, "mode", "replicas")
}
