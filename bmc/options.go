package bmc

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// CheckOptions refuses an option not among known, naming it.
func CheckOptions(options map[string]string, known ...string) error {
	for _, k := range slices.Sorted(maps.Keys(options)) {
		if !slices.Contains(known, k) {
			return proto.Errorf(proto.InvalidConfig, "option %q is unknown; the options are %s", k, strings.Join(known, ", ")).WithPath("options." + k)
		}
	}
	return nil
}

// DurationOption reads a positive duration option ("90s", "5m"), def when absent.
func DurationOption(options map[string]string, name string, def time.Duration) (time.Duration, error) {
	s, ok := options[name]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, proto.Errorf(proto.InvalidConfig, "option %s %q is not a positive duration such as 90s or 5m", name, s).WithPath("options." + name)
	}
	return d, nil
}

// ChoiceOption reads an option that takes one of choices, def when absent.
func ChoiceOption(options map[string]string, name, def string, choices ...string) (string, error) {
	s, ok := options[name]
	if !ok {
		return def, nil
	}
	if !slices.Contains(choices, s) {
		return "", proto.Errorf(proto.InvalidConfig, "option %s %q is not one of %s", name, s, strings.Join(choices, ", ")).WithPath("options." + name)
	}
	return s, nil
}
