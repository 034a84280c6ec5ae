package hostunit

import (
	"fmt"
	"strconv"
	"strings"
)

// A sysctlGuard refuses a sysctl that would let the host run a program as root on the
// kernel's behalf, or lower one of its defenses below the kernel's (or the common
// distributions') default. A GPU host runs tenants' jobs: a profile must not be a way to
// weaken the machine under them. docs/host-units.md lists the guards and why.
type sysctlGuard struct {
	name string
	// prefix makes the guard apply to every sysctl under name as well.
	prefix bool
	// refuses reports why value is refused, "" when it is allowed.
	refuses func(value string) string
}

// sysctlGuards lists the refused sysctls.
var sysctlGuards = []sysctlGuard{
	// Programs the kernel runs as root.
	{name: "kernel.modprobe", refuses: always("the kernel runs this program as root to load modules")},
	{name: "kernel.poweroff_cmd", refuses: always("the kernel runs this program as root to power off")},
	{name: "kernel.hotplug", refuses: always("the kernel runs this program as root for every device event")},
	{name: "fs.binfmt_misc", prefix: true, refuses: always("it registers interpreters the kernel starts for matching files, setuid ones included")},
	{name: "kernel.core_pattern", refuses: corePattern},
	// Defenses that may not be lowered.
	{name: "kernel.randomize_va_space", refuses: atLeast(2, "it weakens address-space layout randomization")},
	{name: "kernel.kptr_restrict", refuses: atLeast(1, "it shows kernel addresses to unprivileged users")},
	{name: "kernel.dmesg_restrict", refuses: atLeast(1, "it opens the kernel log to unprivileged users")},
	{name: "kernel.yama.ptrace_scope", refuses: atLeast(1, "it lets any process trace the other processes of its user")},
	{name: "kernel.unprivileged_bpf_disabled", refuses: atLeast(1, "it lets unprivileged users load BPF programs")},
	{name: "kernel.perf_event_paranoid", refuses: atLeast(2, "it opens kernel profiling to unprivileged users")},
	{name: "kernel.sysrq", refuses: sysrq},
	{name: "fs.suid_dumpable", refuses: atMost(0, "setuid programs would dump core, secrets included")},
	{name: "fs.protected_symlinks", refuses: atLeast(1, "it reopens symlink attacks in sticky directories")},
	{name: "fs.protected_hardlinks", refuses: atLeast(1, "it reopens hard-link attacks on files the user does not own")},
	{name: "fs.protected_fifos", refuses: atLeast(1, "it reopens FIFO spoofing in sticky directories")},
	{name: "fs.protected_regular", refuses: atLeast(1, "it reopens file spoofing in sticky directories")},
	{name: "vm.mmap_min_addr", refuses: atLeast(4096, "it lets processes map page zero, which turns kernel NULL dereferences into exploits")},
	{name: "vm.unprivileged_userfaultfd", refuses: atMost(0, "it gives unprivileged users a tool to win kernel races")},
}

// RefusedSysctl returns why setting name to value is refused, "" when it is allowed. bcd
// checks it again before it writes a value, whatever the registry let through.
func RefusedSysctl(name, value string) string {
	for _, g := range sysctlGuards {
		if name == g.name || g.prefix && strings.HasPrefix(name, g.name+".") {
			if why := g.refuses(value); why != "" {
				return fmt.Sprintf("%s is refused: %s", name, why)
			}
		}
	}
	return ""
}

func always(why string) func(string) string {
	return func(string) string { return why }
}

// atLeast refuses values below min, and values that are no whole number.
func atLeast(min int64, why string) func(string) string {
	return wholeValue(func(n int64) string {
		if n < min {
			return fmt.Sprintf("below %d %s", min, why)
		}
		return ""
	})
}

// atMost refuses values above max, and values that are no whole number.
func atMost(max int64, why string) func(string) string {
	return wholeValue(func(n int64) string {
		if n > max {
			return fmt.Sprintf("above %d %s", max, why)
		}
		return ""
	})
}

// wholeValue reads the value as a whole number for check, refusing any other value.
func wholeValue(check func(n int64) string) func(string) string {
	return func(value string) string {
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return "its value must be a whole number"
		}
		return check(n)
	}
}

// corePattern refuses a core pattern that pipes core dumps to a program (|), which the
// kernel runs as root, or hands them to a socket (@).
func corePattern(value string) string {
	switch v := strings.TrimLeft(value, " "); {
	case strings.HasPrefix(v, "|"):
		return "a pattern starting with | makes the kernel run that program as root for every crash"
	case strings.HasPrefix(v, "@"):
		return "a pattern starting with @ hands every core dump to whoever listens on that socket"
	}
	return ""
}

// sysrqAll is every function bit of kernel.sysrq.
const sysrqAll = 2 | 4 | 8 | 16 | 32 | 64 | 128 | 256

// sysrq refuses opening every SysRq function (1, or a mask with every bit).
var sysrq = wholeValue(func(n int64) string {
	if n == 1 || n&sysrqAll == sysrqAll {
		return "it opens every SysRq function (reboot, kill all, memory dumps) to the console and /proc/sysrq-trigger; set a mask of the functions you need"
	}
	return ""
})
