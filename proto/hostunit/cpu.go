package hostunit

import (
	"github.com/better-compute/better-compute/jsondoc"
)

// CPU sets the frequency governor and isolates CPUs from the scheduler. Isolation takes
// effect after a reboot.
type CPU struct {
	Common
	// Governor is performance, schedutil, ondemand or powersave.
	Governor string `json:"governor,omitempty"`
	// Isolate is a cpulist of CPUs kept from general scheduling ("2-15,18"); see
	// ParseCPUList.
	Isolate string `json:"isolate,omitempty"`
}

// Unit returns "cpu".
func (*CPU) Unit() string { return UnitCPU }

func checkCPU(c checker, v *jsondoc.Value, p jsondoc.Path) {
	c.fields(v, p, map[string]jsondoc.Check{
		"governor": func(v *jsondoc.Value, p jsondoc.Path) {
			c.Enum(v, p, "performance", "schedutil", "ondemand", "powersave")
		},
		"isolate": func(v *jsondoc.Value, p jsondoc.Path) {
			s, ok := c.String(v, p)
			if !ok {
				return
			}
			if _, err := ParseCPUList(s); err != nil {
				c.Add(v, p, "%v", err)
			}
		},
	})
}
