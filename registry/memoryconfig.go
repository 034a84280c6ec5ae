package registry

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// DefaultGCPercent is how far the registry's heap grows past what is live before its
// collector runs again, in percent (the runtime's GOGC; Go's own default is 100). During
// a fleet's return the collector was the largest cost of a reconnect beyond the
// handshake's; at 150 it runs about half as often then, and a session held costs 2-7 KiB
// more at rest (56-60 KiB at 2,000 agents, under the goal of 64; at 10,000, after two
// returns, 61-67 KiB against 58-61 at 100, for a sixth less CPU a reconnect). At 200
// it cost 5-10 KiB more, past the goal in one run of six (docs/benchmarks.md, "The
// collector's share of a reconnect", "Fifteen runs on a slower host").
const DefaultGCPercent = 150

// The bounds of serve's memory flags.
const (
	MinGCPercent = 50
	MaxGCPercent = 1000
	// MinMemoryLimit is the smallest soft memory limit serve takes: below it the
	// collector would run without pause as soon as a few thousand sessions are held.
	MinMemoryLimit = 64 << 20
)

// AutoMemoryPercent is the share of its cgroup's memory limit, in percent, that the
// registry takes as its soft limit when --memory-limit is auto: the rest is for what the
// cgroup counts and the Go runtime does not (docs/operations.md#memory): the store's
// file mapped and its page cache, the kernel's socket buffers, the runtime's own
// overshoot past the soft limit between two collections.
const AutoMemoryPercent = 90

// MemoryConfig is the registry's garbage-collection policy (docs/operations.md#memory):
// how far the heap may grow past what is live before a collection (GCPercent) and a
// soft limit on all the memory the Go runtime holds (Limit), near which the collector
// runs as often as it must to stay under it, whatever GCPercent says. GOGC and
// GOMEMLIMIT in the environment win over each.
type MemoryConfig struct {
	// GCPercent is as GOGC, MinGCPercent to MaxGCPercent; 0 is DefaultGCPercent.
	GCPercent int
	// Limit is the soft memory limit as GOMEMLIMIT writes it: bytes, or a number with
	// the unit B, KiB, MiB, GiB or TiB (4GiB), at least MinMemoryLimit; "none" for
	// none; "" or "auto" for AutoMemoryPercent of the memory limit of the process's
	// cgroup (ReadCgroupMemory), none when it has none.
	Limit string
	// cgroup reads the process's cgroup's memory limit; nil reads the process's own.
	cgroup func() CgroupMemory
}

// MemoryPolicy is what the registry's process runs with: the collector's percent and
// soft limit it sets, or the environment's GOGC and GOMEMLIMIT that win over them.
type MemoryPolicy struct {
	// GCPercent is set unless GOGC (the environment's) is not empty.
	GCPercent int
	GOGC      string
	// Limit, in bytes, is set when not 0, unless GOMEMLIMIT is not empty.
	Limit      int64
	GOMEMLIMIT string
	// LimitFrom says where Limit came from: the flag, the environment, or the cgroup
	// (or why there is none).
	LimitFrom string
}

// Policy checks c and says what the process will run with, the environment read
// through getenv: a value out of bounds is INVALID_INPUT at its flag, even when the
// environment wins over it.
func (c MemoryConfig) Policy(getenv func(string) string) (MemoryPolicy, error) {
	p := MemoryPolicy{GCPercent: c.GCPercent, GOGC: getenv("GOGC"), GOMEMLIMIT: getenv("GOMEMLIMIT")}
	switch {
	case p.GCPercent == 0:
		p.GCPercent = DefaultGCPercent
	case p.GCPercent < MinGCPercent || p.GCPercent > MaxGCPercent:
		return p, proto.Errorf(proto.InvalidInput, "--gc-percent is %d: give %d to %d, or 0 for %d", c.GCPercent, MinGCPercent, MaxGCPercent, DefaultGCPercent).WithPath("--gc-percent")
	}
	switch {
	case c.Limit == "" || c.Limit == "auto":
		if p.GOMEMLIMIT != "" {
			p.LimitFrom = "GOMEMLIMIT"
			break
		}
		read := c.cgroup
		if read == nil {
			read = func() CgroupMemory { return ReadCgroupMemory(os.DirFS("/"), "proc/self") }
		}
		cg := read()
		if cg.Limit == 0 {
			p.LimitFrom = "auto: no cgroup memory limit (" + cg.Reason + ")"
			break
		}
		p.Limit = cg.Limit/100*AutoMemoryPercent + cg.Limit%100*AutoMemoryPercent/100 // cg.Limit*90 would overflow near 2^63
		p.LimitFrom = fmt.Sprintf("auto: %d%% of the cgroup's %d bytes (%s)", AutoMemoryPercent, cg.Limit, cg.File)
	default:
		limit, err := parseMemoryLimit(c.Limit)
		if err != nil {
			return p, proto.Errorf(proto.InvalidInput, "--memory-limit %q: %v", c.Limit, err).WithPath("--memory-limit")
		}
		p.Limit, p.LimitFrom = limit, "--memory-limit"
		if p.GOMEMLIMIT != "" {
			p.LimitFrom = "GOMEMLIMIT"
		}
	}
	return p, nil
}

// memoryUnits are the units of a memory limit, as GOMEMLIMIT takes them, longest first.
var memoryUnits = []struct {
	suffix string
	shift  uint
}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}, {"B", 0}}

// parseMemoryLimit reads a soft memory limit: 0 for none.
func parseMemoryLimit(s string) (int64, error) {
	if s == "none" {
		return 0, nil
	}
	digits, shift := s, uint(0)
	for _, u := range memoryUnits {
		if d, ok := strings.CutSuffix(s, u.suffix); ok {
			digits, shift = d, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("give a size such as 4GiB or 512MiB (units B, KiB, MiB, GiB, TiB), auto, or none")
	}
	if n > (1<<63-1)>>shift {
		return 0, fmt.Errorf("larger than any machine's memory: give a size such as 4GiB, or none")
	}
	if n<<shift < MinMemoryLimit {
		return 0, fmt.Errorf("give at least %d MiB, or none", MinMemoryLimit>>20)
	}
	return n << shift, nil
}

// Apply sets p for the whole process and returns what sets back the settings it
// replaced.
func (p MemoryPolicy) Apply() (restore func()) {
	var undo []func()
	if p.GOGC == "" {
		old := debug.SetGCPercent(p.GCPercent)
		undo = append(undo, func() { debug.SetGCPercent(old) })
	}
	if p.GOMEMLIMIT == "" && p.Limit > 0 {
		old := debug.SetMemoryLimit(p.Limit)
		undo = append(undo, func() { debug.SetMemoryLimit(old) })
	}
	return func() {
		for _, f := range undo {
			f()
		}
	}
}

// LogValue shows the policy in the registry's log: each setting and whether the
// environment's won.
func (p MemoryPolicy) LogValue() slog.Value {
	gc := slog.Int("gc_percent", p.GCPercent)
	if p.GOGC != "" {
		gc = slog.String("gc_percent", "GOGC="+p.GOGC)
	}
	limit := slog.String("memory_limit", "none")
	switch {
	case p.GOMEMLIMIT != "":
		limit = slog.String("memory_limit", "GOMEMLIMIT="+p.GOMEMLIMIT)
	case p.Limit > 0:
		limit = slog.Int64("memory_limit", p.Limit)
	}
	return slog.GroupValue(gc, limit, slog.String("limit_from", p.LimitFrom))
}
