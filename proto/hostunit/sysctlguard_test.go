package hostunit

import (
	"strings"
	"testing"
)

func TestSysctlGuards(t *testing.T) {
	tests := map[string]struct {
		name, value string // value as JSON
		refused     string // a part of the message, "" when allowed
	}{
		"core_pattern pipe":           {"kernel.core_pattern", `"|/usr/bin/crash %p"`, "run that program as root"},
		"core_pattern spaced pipe":    {"kernel.core_pattern", `"  |/x"`, "run that program as root"},
		"core_pattern socket":         {"kernel.core_pattern", `"@/run/core.sock"`, "whoever listens"},
		"core_pattern file":           {"kernel.core_pattern", `"/var/crash/core.%p"`, ""},
		"modprobe":                    {"kernel.modprobe", `"/sbin/modprobe"`, "runs this program as root"},
		"poweroff_cmd":                {"kernel.poweroff_cmd", `"/sbin/poweroff"`, "runs this program as root"},
		"hotplug":                     {"kernel.hotplug", `""`, "for every device event"},
		"binfmt_misc register":        {"fs.binfmt_misc.register", `":x:E::x::/bin/sh:C"`, "registers interpreters"},
		"binfmt_misc status":          {"fs.binfmt_misc.status", `1`, "registers interpreters"},
		"randomize_va_space 1":        {"kernel.randomize_va_space", `1`, "below 2"},
		"randomize_va_space 0 text":   {"kernel.randomize_va_space", `"0"`, "below 2"},
		"randomize_va_space 2":        {"kernel.randomize_va_space", `2`, ""},
		"randomize_va_space garbage":  {"kernel.randomize_va_space", `"full"`, "must be a whole number"},
		"kptr_restrict 0":             {"kernel.kptr_restrict", `0`, "below 1"},
		"kptr_restrict false":         {"kernel.kptr_restrict", `false`, "below 1"},
		"kptr_restrict 2":             {"kernel.kptr_restrict", `2`, ""},
		"dmesg_restrict 0":            {"kernel.dmesg_restrict", `0`, "below 1"},
		"ptrace_scope 0":              {"kernel.yama.ptrace_scope", `0`, "below 1"},
		"ptrace_scope 3":              {"kernel.yama.ptrace_scope", `3`, ""},
		"unprivileged_bpf_disabled 0": {"kernel.unprivileged_bpf_disabled", `0`, "below 1"},
		"unprivileged_bpf_disabled 2": {"kernel.unprivileged_bpf_disabled", `2`, ""},
		"perf_event_paranoid -1":      {"kernel.perf_event_paranoid", `-1`, "below 2"},
		"perf_event_paranoid 1":       {"kernel.perf_event_paranoid", `1`, "below 2"},
		"perf_event_paranoid 3":       {"kernel.perf_event_paranoid", `3`, ""},
		"sysrq 1":                     {"kernel.sysrq", `1`, "every SysRq function"},
		"sysrq all bits":              {"kernel.sysrq", `510`, "every SysRq function"},
		"sysrq true":                  {"kernel.sysrq", `true`, "every SysRq function"},
		"sysrq 176":                   {"kernel.sysrq", `176`, ""},
		"sysrq 0":                     {"kernel.sysrq", `0`, ""},
		"suid_dumpable 1":             {"fs.suid_dumpable", `1`, "above 0"},
		"suid_dumpable 2":             {"fs.suid_dumpable", `"2"`, "above 0"},
		"suid_dumpable 0":             {"fs.suid_dumpable", `0`, ""},
		"protected_symlinks 0":        {"fs.protected_symlinks", `0`, "symlink attacks"},
		"protected_hardlinks 0":       {"fs.protected_hardlinks", `0`, "hard-link attacks"},
		"protected_fifos 0":           {"fs.protected_fifos", `0`, "FIFO spoofing"},
		"protected_regular 0":         {"fs.protected_regular", `0`, "file spoofing"},
		"protected_regular 2":         {"fs.protected_regular", `2`, ""},
		"mmap_min_addr 0":             {"vm.mmap_min_addr", `0`, "map page zero"},
		"mmap_min_addr 65536":         {"vm.mmap_min_addr", `65536`, ""},
		"unprivileged_userfaultfd 1":  {"vm.unprivileged_userfaultfd", `1`, "win kernel races"},
		"unrelated":                   {"vm.swappiness", `0`, ""},
		"prefix needs a dot":          {"fs.binfmt_miscellaneous", `1`, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			problems := Validate("sysctl", []byte(`{"`+tc.name+`": `+tc.value+`}`))
			switch {
			case tc.refused == "" && len(problems) > 0:
				t.Errorf("refused: %v", problems)
			case tc.refused != "" && len(problems) == 0:
				t.Error("accepted")
			case tc.refused != "":
				p := problems[0]
				if string(p.Path) != tc.name || !strings.Contains(p.Message, tc.refused) || !strings.HasPrefix(p.Message, tc.name+" is refused: ") {
					t.Errorf("got %q at %q; want %q at %q", p.Message, p.Path, tc.refused, tc.name)
				}
			}
		})
	}
}
