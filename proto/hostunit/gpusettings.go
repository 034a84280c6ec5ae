package hostunit

import "github.com/better-compute/better-compute/jsondoc"

// GPUSettings sets every GPU's power limit and ECC mode. A field left out is left as the
// GPU has it; an ECC change takes effect after a reboot.
type GPUSettings struct {
	Common
	// PowerLimitWatts is the power limit, 1 to 10000 W.
	PowerLimitWatts *int64 `json:"powerLimitWatts,omitempty"`
	// ECC turns error-correcting memory on or off.
	ECC *bool `json:"ecc,omitempty"`
}

// Unit returns "gpu-settings".
func (*GPUSettings) Unit() string { return UnitGPUSettings }

func checkGPUSettings(c checker, v *jsondoc.Value, p jsondoc.Path) {
	c.fields(v, p, map[string]jsondoc.Check{
		"powerLimitWatts": func(v *jsondoc.Value, p jsondoc.Path) { c.Whole(v, p, 1, 10000) },
		"ecc":             c.bool,
	})
}
