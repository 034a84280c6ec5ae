package hostunit

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
)

// Sysctl sets kernel parameters (/proc/sys). Its settings are sysctl names with scalar
// values, beside when.
type Sysctl struct {
	Common
	// Values maps a sysctl name to the text written to its file: strings as they are,
	// whole numbers in decimal, true and false as 1 and 0.
	Values map[string]string
}

// Unit returns "sysctl".
func (*Sysctl) Unit() string { return UnitSysctl }

// MarshalJSON writes the values and when as one object.
func (s Sysctl) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(s.Values)+1)
	for k, v := range s.Values {
		m[k] = v
	}
	if !s.When.IsZero() {
		m["when"] = s.When
	}
	return proto.Marshal(m)
}

// UnmarshalJSON reads an object of sysctl names and scalar values, and when.
func (s *Sysctl) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	s.Values = make(map[string]string, len(m))
	for k, raw := range m {
		if k == "when" {
			if err := json.Unmarshal(raw, &s.When); err != nil {
				return err
			}
			continue
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		switch v := v.(type) {
		case bool:
			s.Values[k] = "0"
			if v {
				s.Values[k] = "1"
			}
		case float64:
			s.Values[k] = string(raw)
		case string:
			s.Values[k] = v
		}
	}
	return nil
}

// Limits of the sysctl unit.
const (
	maxSysctls        = 512
	maxSysctlNameLen  = 256
	maxSysctlValueLen = 4096
)

func checkSysctl(c checker, v *jsondoc.Value, p jsondoc.Path) {
	members, ok := c.object(v, p, maxSysctls)
	if !ok {
		return
	}
	for _, m := range members {
		mp := p.Field(m.Key)
		if m.Key == "when" {
			c.when(m.Value, mp)
			continue
		}
		if !isSysctlName(m.Key) {
			c.AddAt(m.KeyOffset, mp, "%q is not a sysctl name: two or more dot-separated parts of a-z, 0-9, _, - and / (a / stands for a dot inside a part), not starting with -, at most %d bytes", m.Key, maxSysctlNameLen)
			continue
		}
		value, ok := c.sysctlValue(m.Value, mp)
		if !ok {
			continue
		}
		if why := RefusedSysctl(m.Key, value); why != "" {
			c.Add(m.Value, mp, "%s", why)
		}
	}
}

// isSysctlName reports a name of two or more dot-separated parts, each of a-z, 0-9, _, -
// and /, not starting with /. bcd writes the name under /proc/sys with dots turned into
// slashes and slashes into dots, so a / stands for a dot inside one part (an interface
// called eth0.100), and no part can become "." or "..". The name does not start with -:
// sysctl.d reads a leading - as "ignore a failure to set what follows", so -kernel.modprobe
// would set kernel.modprobe at the next boot past the guards, which compare names.
func isSysctlName(s string) bool {
	if len(s) > maxSysctlNameLen || strings.HasPrefix(s, "-") {
		return false
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return false
	}
	for _, part := range parts {
		if part == "" || part[0] == '/' {
			return false
		}
		for i := 0; i < len(part); i++ {
			if b := part[i]; !isLowerAlnum(b) && b != '_' && b != '-' && b != '/' {
				return false
			}
		}
	}
	return true
}

// sysctlValue returns the text a scalar value writes, or records why it is no scalar.
func (c checker) sysctlValue(v *jsondoc.Value, p jsondoc.Path) (string, bool) {
	switch v.Kind {
	case jsondoc.String:
		return c.line(v, p, maxSysctlValueLen)
	case jsondoc.Number:
		n, err := jsondoc.WholeNumber(v.Text)
		if err != nil {
			c.Add(v, p, "%s must be a whole number: %v", v.Text, err)
			return "", false
		}
		return strconv.FormatInt(n, 10), true
	case jsondoc.Bool:
		if v.Bool {
			return "1", true
		}
		return "0", true
	}
	c.Add(v, p, "must be a string, a whole number or a boolean, not %s", v.Kind)
	return "", false
}
