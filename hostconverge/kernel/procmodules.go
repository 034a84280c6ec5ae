package kernel

import "strings"

// ProcModules is where the kernel lists its loaded modules.
const ProcModules = "/proc/modules"

// ParseProcModules returns the names of the loaded modules listed in /proc/modules: the
// first field of each line ("nvidia 54947840 120 nvidia_uvm,nvidia_modeset, Live 0x0").
// The kernel spells module names with _ for -.
func ParseProcModules(data string) map[string]bool {
	loaded := map[string]bool{}
	for line := range strings.SplitSeq(data, "\n") {
		if name, _, _ := strings.Cut(line, " "); name != "" {
			loaded[name] = true
		}
	}
	return loaded
}

// parseBuiltin returns the names of the modules built into the kernel, from
// modules.builtin: one path per line, like kernel/drivers/char/ipmi/ipmi_devintf.ko.
func parseBuiltin(data string) map[string]bool {
	builtin := map[string]bool{}
	for line := range strings.SplitSeq(data, "\n") {
		base := line[strings.LastIndexByte(line, '/')+1:]
		if name, ok := strings.CutSuffix(base, ".ko"); ok && name != "" {
			builtin[strings.ReplaceAll(name, "-", "_")] = true
		}
	}
	return builtin
}
