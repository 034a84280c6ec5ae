package cli_test

import (
	"math"
	"testing"

	"github.com/better-compute/better-compute/registry"
	"github.com/better-compute/better-compute/testkit"
)

// TestServeSetsItsGarbageCollection: the registry's process runs its collector as
// serve's flags say, as its own /metrics reads them from the runtime (go_gc_gogc_percent,
// go_gc_gomemlimit_bytes): registry.DefaultGCPercent and no limit by default, the flags'
// values when given, and GOGC and GOMEMLIMIT from the environment over the flags.
func TestServeSetsItsGarbageCollection(t *testing.T) {
	for name, tc := range map[string]struct {
		env            map[string]string
		args           []string
		percent, limit float64
	}{
		"the defaults":      {nil, nil, registry.DefaultGCPercent, math.MaxInt64},
		"the flags":         {nil, []string{"--gc-percent", "400", "--memory-limit", "512MiB"}, 400, 512 << 20},
		"the environment's": {map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}, []string{"--gc-percent", "400", "--memory-limit", "512MiB"}, 150, 1 << 30},
	} {
		t.Run(name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v) // the registry's process inherits it
			}
			reg := testkit.StartRegistry(t, "", append([]string{"--metrics-listen", "127.0.0.1:0"}, tc.args...)...)
			samples, text := testkit.Scrape(t, reg.MetricsURL)
			if samples["go_gc_gogc_percent"] != tc.percent || samples["go_gc_gomemlimit_bytes"] != tc.limit {
				t.Errorf("GC percent %v, memory limit %v; want %v, %v\n%s", samples["go_gc_gogc_percent"], samples["go_gc_gomemlimit_bytes"], tc.percent, tc.limit, text)
			}
		})
	}
}

// TestServeRefusesGarbageCollectionOutOfBounds: a percent or a memory limit out of
// bounds is INVALID_INPUT at its flag, before anything starts.
func TestServeRefusesGarbageCollectionOutOfBounds(t *testing.T) {
	serveRefusesAtTheFlag(t, map[string][]string{
		"--gc-percent":   {"-1", "10", "5000"},
		"--memory-limit": {"1MiB", "4GB", "lots"},
	})
}
