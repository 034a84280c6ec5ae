package cli_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry"
	"github.com/better-compute/better-compute/testkit"
)

// TestServeSetsItsGarbageCollection: the registry's process runs its collector as
// serve's flags say, as its own /metrics reads them from the runtime (go_gc_gogc_percent,
// go_gc_gomemlimit_bytes): registry.DefaultGCPercent and, by default, 90% of the memory
// limit of the cgroup it runs in (this machine's, none when it has none), the flags'
// values when given, and GOGC and GOMEMLIMIT from the environment over the flags; its
// log says where the limit came from.
func TestServeSetsItsGarbageCollection(t *testing.T) {
	auto, autoFrom := float64(math.MaxInt64), "auto: no cgroup memory limit"
	if cg := registry.ReadCgroupMemory(os.DirFS("/"), "proc/self"); cg.Limit > 0 {
		auto, autoFrom = float64(cg.Limit/100*registry.AutoMemoryPercent+cg.Limit%100*registry.AutoMemoryPercent/100), "auto: 90% of the cgroup's"
	}
	for name, tc := range map[string]struct {
		env            map[string]string
		args           []string
		percent, limit float64
		from           string
	}{
		"the defaults":      {nil, nil, registry.DefaultGCPercent, auto, autoFrom},
		"auto":              {nil, []string{"--memory-limit", "auto"}, registry.DefaultGCPercent, auto, autoFrom},
		"none":              {nil, []string{"--memory-limit", "none"}, registry.DefaultGCPercent, math.MaxInt64, "limit_from=--memory-limit"},
		"the flags":         {nil, []string{"--gc-percent", "400", "--memory-limit", "512MiB"}, 400, 512 << 20, "limit_from=--memory-limit"},
		"the environment's": {map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}, []string{"--gc-percent", "400", "--memory-limit", "512MiB"}, 150, 1 << 30, "limit_from=GOMEMLIMIT"},
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
			if log := reg.Stderr.String(); !strings.Contains(gcLogLine(log), tc.from) {
				t.Errorf("the garbage collection log line does not say %q:\n%s", tc.from, log)
			}
		})
	}
}

// gcLogLine is the registry's "garbage collection" log line in log.
func gcLogLine(log string) string {
	for line := range strings.SplitSeq(log, "\n") {
		if strings.Contains(line, `msg="garbage collection"`) {
			return line
		}
	}
	return ""
}

// TestServeTakesItsCgroupsMemoryLimit: a registry started in a memory cgroup limited to
// 512 MiB (cgroup v1's memory controller, made here under this process's own) sets its
// soft limit to 90% of it by default, as its /metrics reads it from the runtime, and
// logs the cgroup's file it came from.
func TestServeTakesItsCgroupsMemoryLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a memory cgroup")
	}
	parent := ownMemoryCgroupV1(t)
	dir := filepath.Join(parent, fmt.Sprintf("bc-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("no writable memory cgroup under %s: %v", parent, err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil { // after the registry has stopped (cleanups run last first)
			t.Errorf("remove the cgroup: %v", err)
		}
	})
	limitFile := filepath.Join(dir, "memory.limit_in_bytes")
	if err := os.WriteFile(limitFile, []byte("536870912"), 0); err != nil {
		t.Skipf("cannot limit the memory cgroup %s: %v", dir, err)
	}
	t.Setenv("CGROUP_PROCS", filepath.Join(dir, "cgroup.procs")) // the shell joins the cgroup, then becomes serve
	reg := testkit.StartRegistryVia(t, []string{"sh", "-c", `echo $$ > "$CGROUP_PROCS" && exec "$0" "$@"`}, "",
		"--metrics-listen", "127.0.0.1:0")
	samples, text := testkit.Scrape(t, reg.MetricsURL)
	const want = 536870912 * 9 / 10
	if got := samples["go_gc_gomemlimit_bytes"]; got != want {
		t.Errorf("memory limit %v, want %v (90%% of 512 MiB)\n%s", got, want, text)
	}
	if line := gcLogLine(reg.Stderr.String()); !strings.Contains(line, limitFile) {
		t.Errorf("the garbage collection log line does not name %s:\n%s", limitFile, reg.Stderr)
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

// ownMemoryCgroupV1 is the directory of this process's cgroup in cgroup v1's memory
// controller; the test is skipped where there is none.
func ownMemoryCgroupV1(t *testing.T) string {
	procCgroup, err1 := os.ReadFile("/proc/self/cgroup")
	mountinfo, err2 := os.ReadFile("/proc/self/mountinfo")
	if err1 != nil || err2 != nil {
		t.Skipf("no cgroups: %v %v", err1, err2)
	}
	var cgroup string
	for line := range strings.SplitSeq(string(procCgroup), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "memory") {
			cgroup = parts[2]
		}
	}
	for line := range strings.SplitSeq(string(mountinfo), "\n") {
		f := strings.Fields(line)
		if sep := slices.Index(f, "-"); cgroup != "" && sep > 4 && len(f) > sep+3 && f[sep+1] == "cgroup" && f[3] == "/" &&
			slices.Contains(strings.Split(f[sep+3], ","), "memory") {
			return filepath.Join(f[4], cgroup)
		}
	}
	t.Skip("no cgroup v1 memory controller mounted whole for this process")
	return ""
}
