package registry

import (
	"errors"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/better-compute/better-compute/proto"
)

// envOf is a getenv over vars.
func envOf(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// limited and unlimited are a cgroup with a memory limit of 512 MiB and one without.
var (
	limited = func() CgroupMemory {
		return CgroupMemory{Limit: 512 << 20, File: "/sys/fs/cgroup/memory/reg/memory.limit_in_bytes"}
	}
	unlimited = func() CgroupMemory { return CgroupMemory{Reason: "no memory limit on /sys/fs/cgroup/memory/reg"} }
	noLimit   = "auto: no cgroup memory limit (no memory limit on /sys/fs/cgroup/memory/reg)"
)

// TestMemoryPolicy: what serve's flags and the environment make of the collector's
// settings: the defaults, each flag, and GOGC and GOMEMLIMIT winning over the flag
// they stand for and only over it.
func TestMemoryPolicy(t *testing.T) {
	for name, tc := range map[string]struct {
		c    MemoryConfig
		env  map[string]string
		want MemoryPolicy
	}{
		"the defaults":        {MemoryConfig{}, nil, MemoryPolicy{GCPercent: DefaultGCPercent, LimitFrom: noLimit}},
		"auto is the default": {MemoryConfig{Limit: "auto"}, nil, MemoryPolicy{GCPercent: DefaultGCPercent, LimitFrom: noLimit}},
		"auto in a limited cgroup": {MemoryConfig{cgroup: limited}, nil,
			MemoryPolicy{GCPercent: DefaultGCPercent, Limit: 483183820 /* 90% of 512 MiB, rounded down */, LimitFrom: "auto: 90% of the cgroup's 536870912 bytes (/sys/fs/cgroup/memory/reg/memory.limit_in_bytes)"}},
		"auto under a small limit": {MemoryConfig{Limit: "auto", cgroup: func() CgroupMemory { return CgroupMemory{Limit: 10 << 20, File: "/m"} }}, nil,
			MemoryPolicy{GCPercent: DefaultGCPercent, Limit: 9437184, LimitFrom: "auto: 90% of the cgroup's 10485760 bytes (/m)"}},
		"GOMEMLIMIT wins over auto":  {MemoryConfig{cgroup: limited}, map[string]string{"GOMEMLIMIT": "2GiB"}, MemoryPolicy{GCPercent: DefaultGCPercent, GOMEMLIMIT: "2GiB", LimitFrom: "GOMEMLIMIT"}},
		"none is no limit":           {MemoryConfig{Limit: "none", cgroup: limited}, nil, MemoryPolicy{GCPercent: DefaultGCPercent, LimitFrom: "--memory-limit"}},
		"a percent":                  {MemoryConfig{GCPercent: 400}, nil, MemoryPolicy{GCPercent: 400, LimitFrom: noLimit}},
		"the lowest percent":         {MemoryConfig{GCPercent: MinGCPercent}, nil, MemoryPolicy{GCPercent: MinGCPercent, LimitFrom: noLimit}},
		"the highest percent":        {MemoryConfig{GCPercent: MaxGCPercent}, nil, MemoryPolicy{GCPercent: MaxGCPercent, LimitFrom: noLimit}},
		"a limit in GiB":             {MemoryConfig{Limit: "4GiB", cgroup: limited}, nil, MemoryPolicy{GCPercent: DefaultGCPercent, Limit: 4 << 30, LimitFrom: "--memory-limit"}},
		"a limit in MiB":             {MemoryConfig{Limit: "512MiB"}, nil, MemoryPolicy{GCPercent: DefaultGCPercent, Limit: 512 << 20, LimitFrom: "--memory-limit"}},
		"a limit in KiB":             {MemoryConfig{Limit: "65536KiB"}, nil, MemoryPolicy{GCPercent: DefaultGCPercent, Limit: 64 << 20, LimitFrom: "--memory-limit"}},
		"a limit in TiB":             {MemoryConfig{Limit: "1TiB"}, nil, MemoryPolicy{GCPercent: DefaultGCPercent, Limit: 1 << 40, LimitFrom: "--memory-limit"}},
		"a limit in bytes":           {MemoryConfig{Limit: "67108864"}, nil, MemoryPolicy{GCPercent: DefaultGCPercent, Limit: MinMemoryLimit, LimitFrom: "--memory-limit"}},
		"a limit with its unit B":    {MemoryConfig{Limit: "67108864B"}, nil, MemoryPolicy{GCPercent: DefaultGCPercent, Limit: MinMemoryLimit, LimitFrom: "--memory-limit"}},
		"GOGC wins over the percent": {MemoryConfig{GCPercent: 400, Limit: "1GiB"}, map[string]string{"GOGC": "off"}, MemoryPolicy{GCPercent: 400, GOGC: "off", Limit: 1 << 30, LimitFrom: "--memory-limit"}},
		"GOMEMLIMIT wins over the limit": {MemoryConfig{GCPercent: 400, Limit: "1GiB"}, map[string]string{"GOMEMLIMIT": "2GiB"},
			MemoryPolicy{GCPercent: 400, Limit: 1 << 30, GOMEMLIMIT: "2GiB", LimitFrom: "GOMEMLIMIT"}},
		"both from the environment": {MemoryConfig{}, map[string]string{"GOGC": "100", "GOMEMLIMIT": "2GiB"}, MemoryPolicy{GCPercent: DefaultGCPercent, GOGC: "100", GOMEMLIMIT: "2GiB", LimitFrom: "GOMEMLIMIT"}},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.c.cgroup == nil {
				tc.c.cgroup = unlimited
			}
			got, err := tc.c.Policy(envOf(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("policy (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMemoryPolicyRefusesValuesOutOfBounds: a percent or a limit out of bounds, or a
// limit that is not a size, is INVALID_INPUT at its flag, even when the environment
// would win over it (an operator's mistake is told, not hidden).
func TestMemoryPolicyRefusesValuesOutOfBounds(t *testing.T) {
	both := map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"}
	for name, tc := range map[string]struct {
		c    MemoryConfig
		env  map[string]string
		flag string
	}{
		"a percent below the lowest":      {MemoryConfig{GCPercent: MinGCPercent - 1}, nil, "--gc-percent"},
		"a percent above the highest":     {MemoryConfig{GCPercent: MaxGCPercent + 1}, nil, "--gc-percent"},
		"a negative percent":              {MemoryConfig{GCPercent: -1}, nil, "--gc-percent"},
		"a bad percent under GOGC":        {MemoryConfig{GCPercent: 5}, both, "--gc-percent"},
		"a limit below the lowest":        {MemoryConfig{Limit: "63MiB"}, nil, "--memory-limit"},
		"a limit of 0":                    {MemoryConfig{Limit: "0"}, nil, "--memory-limit"},
		"a decimal unit":                  {MemoryConfig{Limit: "4GB"}, nil, "--memory-limit"},
		"a fraction":                      {MemoryConfig{Limit: "1.5GiB"}, nil, "--memory-limit"},
		"a negative limit":                {MemoryConfig{Limit: "-1GiB"}, nil, "--memory-limit"},
		"a unit alone":                    {MemoryConfig{Limit: "GiB"}, nil, "--memory-limit"},
		"spaces":                          {MemoryConfig{Limit: "4 GiB"}, nil, "--memory-limit"},
		"a limit past int64":              {MemoryConfig{Limit: "9999999999TiB"}, nil, "--memory-limit"},
		"bytes past int64":                {MemoryConfig{Limit: "99999999999999999999"}, nil, "--memory-limit"},
		"a bad limit under GOMEMLIMIT":    {MemoryConfig{Limit: "lots"}, both, "--memory-limit"},
		"the runtime's off is not a size": {MemoryConfig{Limit: "off"}, nil, "--memory-limit"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tc.c.Policy(envOf(tc.env))
			pe, ok := errors.AsType[*proto.Error](err)
			if !ok || pe.Code != proto.InvalidInput || pe.Details.Path != tc.flag {
				t.Fatalf("%+v: got %v, want INVALID_INPUT at %s", tc.c, err, tc.flag)
			}
		})
	}
}

// TestMemoryPolicyApply: Apply sets the process's collector as the policy says, leaves
// alone what the environment set, and its restore sets back what it replaced.
func TestMemoryPolicyApply(t *testing.T) {
	percent, limit := debug.SetGCPercent(123), debug.SetMemoryLimit(3<<30)
	t.Cleanup(func() { debug.SetGCPercent(percent); debug.SetMemoryLimit(limit) })
	read := func() (int, int64) {
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p, debug.SetMemoryLimit(-1) // a negative limit reads it
	}
	for name, tc := range map[string]struct {
		p                  MemoryPolicy
		percent            int
		limit              int64
		wantPercentApplied bool
	}{
		"both":              {MemoryPolicy{GCPercent: 250, Limit: 1 << 30}, 250, 1 << 30, true},
		"no limit":          {MemoryPolicy{GCPercent: 250}, 250, 3 << 30, true},
		"GOGC set":          {MemoryPolicy{GCPercent: 250, GOGC: "123", Limit: 1 << 30}, 123, 1 << 30, false},
		"GOMEMLIMIT set":    {MemoryPolicy{GCPercent: 250, Limit: 1 << 30, GOMEMLIMIT: "3GiB"}, 250, 3 << 30, true},
		"the environment's": {MemoryPolicy{GCPercent: 250, GOGC: "123", Limit: 1 << 30, GOMEMLIMIT: "3GiB"}, 123, 3 << 30, false},
	} {
		t.Run(name, func(t *testing.T) {
			restore := tc.p.Apply()
			gotPercent, gotLimit := read()
			restore()
			if gotPercent != tc.percent || gotLimit != tc.limit {
				t.Errorf("applied: GC percent %d, limit %d; want %d, %d", gotPercent, gotLimit, tc.percent, tc.limit)
			}
			if p, l := read(); p != 123 || l != 3<<30 {
				t.Errorf("restored: GC percent %d, limit %d; want 123, %d", p, l, int64(3<<30))
			}
		})
	}
}

// FuzzMemoryLimit: any --memory-limit is a limit of at least MinMemoryLimit, none, or
// refused; never a panic, and an accepted one reads the same written in bytes.
func FuzzMemoryLimit(f *testing.F) {
	for _, s := range []string{"", "none", "4GiB", "512MiB", "67108864", "67108864B", "0", "-1", "4GB", "1.5GiB", "9999999999TiB", "GiB", "B", "8589934592KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseMemoryLimit(s)
		switch {
		case err != nil:
			if n != 0 {
				t.Fatalf("%q refused with a limit %d", s, n)
			}
		case n == 0:
			if s != "none" {
				t.Fatalf("%q read as no limit", s)
			}
		case n < MinMemoryLimit:
			t.Fatalf("%q read as %d", s, n)
		default:
			if again, err := parseMemoryLimit(strconv.FormatInt(n, 10)); err != nil || again != n {
				t.Fatalf("%q read as %d, and %d as %d (%v)", s, n, n, again, err)
			}
		}
	})
}
