package hostunit

import (
	"strings"

	"github.com/better-compute/better-compute/jsondoc"
)

// KernelModules loads kernel modules at boot and sets their options (modules-load.d and
// modprobe.d).
type KernelModules struct {
	Common
	// Load lists the modules to load.
	Load []string `json:"load,omitempty"`
	// Options maps a module to its parameters, "key=value key=value".
	Options map[string]string `json:"options,omitempty"`
}

// Unit returns "kernel-modules".
func (*KernelModules) Unit() string { return UnitKernelModules }

// Limits of the kernel-modules unit.
const (
	maxModules       = 256
	maxModuleNameLen = 55 // MODULE_NAME_LEN less its terminating NUL
	maxOptionsLen    = 1024
)

func checkKernelModules(c checker, v *jsondoc.Value, p jsondoc.Path) {
	c.fields(v, p, map[string]jsondoc.Check{
		"load": func(v *jsondoc.Value, p jsondoc.Path) {
			items, ok := c.Array(v, p, maxModules)
			if !ok {
				return
			}
			seen := map[string]bool{}
			for i, item := range items {
				name, ok := c.moduleName(item, p.Index(i))
				if !ok {
					continue
				}
				if seen[CanonicalModule(name)] {
					c.Add(item, p.Index(i), "module %s is listed twice", name)
				}
				seen[CanonicalModule(name)] = true
			}
		},
		"options": func(v *jsondoc.Value, p jsondoc.Path) {
			members, ok := c.object(v, p, maxModules)
			if !ok {
				return
			}
			seen := map[string]bool{}
			for _, m := range members {
				mp := p.Field(m.Key)
				if !isModuleName(m.Key) {
					c.AddAt(m.KeyOffset, mp, "%q is not a module name (1 to %d of a-z, 0-9, _ and -, starting with a letter or digit)", m.Key, maxModuleNameLen)
					continue
				}
				if seen[CanonicalModule(m.Key)] {
					c.AddAt(m.KeyOffset, mp, "module %s has options twice (- and _ are the same in module names)", m.Key)
				}
				seen[CanonicalModule(m.Key)] = true
				c.moduleOptions(m.Value, mp)
			}
		},
	})
}

func (c checker) moduleName(v *jsondoc.Value, p jsondoc.Path) (string, bool) {
	s, ok := c.String(v, p)
	if !ok {
		return "", false
	}
	if !isModuleName(s) {
		c.Add(v, p, "%q is not a module name (1 to %d of a-z, 0-9, _ and -, starting with a letter or digit)", s, maxModuleNameLen)
		return "", false
	}
	return s, true
}

// isModuleName reports 1 to maxModuleNameLen of a-z, 0-9, _ and -, not starting with -:
// bcd runs modprobe NAME, which would read such a name as one of its options.
func isModuleName(s string) bool {
	if s == "" || len(s) > maxModuleNameLen || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isLowerAlnum(s[i]) && s[i] != '_' && s[i] != '-' {
			return false
		}
	}
	return true
}

// CanonicalModule spells a module or parameter name the way the kernel compares it, with
// - and _ the same.
func CanonicalModule(s string) string { return strings.ReplaceAll(s, "-", "_") }

// moduleOptions checks "key=value key=value": tokens separated by spaces, each a parameter
// name and a value of printable characters without quotes, backslashes or #.
func (c checker) moduleOptions(v *jsondoc.Value, p jsondoc.Path) {
	s, ok := c.line(v, p, maxOptionsLen)
	if !ok {
		return
	}
	tokens := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' })
	if len(tokens) == 0 {
		c.Add(v, p, "is empty; leave the module out of options instead")
		return
	}
	seen := map[string]bool{}
	for _, tok := range tokens {
		key, value, found := strings.Cut(tok, "=")
		switch {
		case !found:
			c.Add(v, p, "%q is not key=value", tok)
		case !isParamName(key):
			c.Add(v, p, "%q is not a parameter name (letters, digits, _ and -)", key)
		case !isOptionValue(value):
			c.Add(v, p, "the value of %s must be printable characters without quotes, backslashes or #", key)
		case seen[CanonicalModule(key)]:
			c.Add(v, p, "parameter %s is set twice", key)
		default:
			seen[CanonicalModule(key)] = true
			continue
		}
		return
	}
}

// isOptionValue reports a non-empty run of printable ASCII without quotes, backslashes or
// the comment sign, which modprobe.d would read differently.
func isOptionValue(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' || strings.IndexByte("\"'\\#", s[i]) >= 0 {
			return false
		}
	}
	return true
}

func isParamName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !isLowerAlnum(b) && !(b >= 'A' && b <= 'Z') && b != '_' && b != '-' {
			return false
		}
	}
	return true
}

func isLowerAlnum(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }
