package hostunit

import "github.com/better-compute/better-compute/jsondoc"

// NvidiaDriver installs the NVIDIA GPU driver of one branch.
type NvidiaDriver struct {
	Common
	// Branch is the driver branch, three digits ("580").
	Branch string `json:"branch"`
	// Open selects the open kernel modules instead of the proprietary ones. Default false.
	Open bool `json:"open,omitempty"`
}

// Unit returns "nvidia-driver".
func (*NvidiaDriver) Unit() string { return UnitNvidiaDriver }

func checkNvidiaDriver(c checker, v *jsondoc.Value, p jsondoc.Path) {
	c.fields(v, p, map[string]jsondoc.Check{
		"branch": func(v *jsondoc.Value, p jsondoc.Path) {
			s, ok := c.String(v, p)
			if ok && !isDigits(s, 3) {
				c.Add(v, p, "%q is not a driver branch: three digits, like \"580\"", s)
			}
		},
		"open": c.bool,
	}, "branch")
}

// isDigits reports whether s is exactly n ASCII digits.
func isDigits(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
