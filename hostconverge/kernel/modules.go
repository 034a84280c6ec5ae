package kernel

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// The files of the kernel-modules unit.
const (
	// ModulesLoad lists the modules systemd loads at boot.
	ModulesLoad = "/etc/modules-load.d/better-compute.conf"
	// ModprobeOptions holds the modules' options, which modprobe applies whenever it
	// loads them.
	ModprobeOptions = "/etc/modprobe.d/better-compute.conf"
)

// Modules converges the kernel-modules unit: it writes the boot-time module list and the
// modules' options (removing either file when the unit sets nothing for it), loads each
// module that is neither loaded nor built in with modprobe, and records a reboot for a
// module already running with other options than the unit sets.
func Modules(ctx context.Context, p *hostenv.Pass, s *hostunit.KernelModules) error {
	if err := ensureOrRemove(p, ModulesLoad, renderModulesLoad(s.Load)); err != nil {
		return err
	}
	if err := ensureOrRemove(p, ModprobeOptions, renderModprobe(s.Options)); err != nil {
		return err
	}
	if len(s.Load) == 0 && len(s.Options) == 0 {
		return nil
	}
	procModules, found, err := p.ReadOptional(ProcModules)
	if err != nil {
		return err
	}
	if !found {
		return proto.Errorf(proto.Unsupported, "the kernel cannot load modules (%s is missing); the files for the next boot are written", ProcModules)
	}
	loadedBefore := ParseProcModules(string(procModules))
	builtin, err := builtinModules(p)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range s.Load {
		c := hostunit.CanonicalModule(name)
		if loadedBefore[c] || builtin[c] {
			continue
		}
		if _, err := p.Change(ctx, "loaded module "+name, "modprobe", name); err != nil {
			errs = append(errs, err)
		}
	}
	for _, module := range slices.Sorted(maps.Keys(s.Options)) {
		c := hostunit.CanonicalModule(module)
		if !loadedBefore[c] {
			continue
		}
		if err := checkRunningOptions(p, module, s.Options[module]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkRunningOptions records a reboot when the loaded module runs with a parameter value
// other than options sets (as /sys/module/NAME/parameters shows it; a parameter the
// module does not show is not compared).
func checkRunningOptions(p *hostenv.Pass, module, options string) error {
	var differ []string
	for _, opt := range strings.Fields(options) {
		key, want, _ := strings.Cut(opt, "=")
		name := "/sys/module/" + hostunit.CanonicalModule(module) + "/parameters/" + hostunit.CanonicalModule(key)
		data, found, err := p.ReadOptional(name)
		if err != nil {
			return err
		}
		if found && !sameParam(strings.TrimSpace(string(data)), want) {
			differ = append(differ, key+"="+strings.TrimSpace(string(data)))
		}
	}
	if len(differ) > 0 {
		p.RebootFor("module %s runs with %s; its options apply when it is loaded again", module, strings.Join(differ, " "))
	}
	return nil
}

// sameParam compares a parameter as the kernel shows it with the value the unit sets;
// the kernel shows booleans as Y and N.
func sameParam(actual, want string) bool {
	if actual == want {
		return true
	}
	switch actual {
	case "Y":
		return slices.Contains([]string{"1", "y", "on", "true"}, strings.ToLower(want))
	case "N":
		return slices.Contains([]string{"0", "n", "off", "false"}, strings.ToLower(want))
	}
	return false
}

// builtinModules reads the running kernel's modules.builtin; a host without it has none
// known.
func builtinModules(p *hostenv.Pass) (map[string]bool, error) {
	release, found, err := p.ReadOptional("/proc/sys/kernel/osrelease")
	if err != nil || !found {
		return map[string]bool{}, err
	}
	data, _, err := p.ReadOptional("/lib/modules/" + strings.TrimSpace(string(release)) + "/modules.builtin")
	return parseBuiltin(string(data)), err
}

func renderModulesLoad(load []string) []byte {
	if len(load) == 0 {
		return nil
	}
	return []byte(header("kernel-modules") + strings.Join(load, "\n") + "\n")
}

func renderModprobe(options map[string]string) []byte {
	if len(options) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString(header("kernel-modules"))
	for _, module := range slices.Sorted(maps.Keys(options)) {
		b.WriteString("options " + module + " " + strings.Join(strings.Fields(options[module]), " ") + "\n")
	}
	return []byte(b.String())
}

// header is the comment that opens every file a unit of this package writes.
func header(unit string) string {
	return "# Written by bcd for the better-compute host-config unit " + unit + ".\n# bcd rewrites this file; change the unit instead.\n"
}

// ensureOrRemove makes the host file name hold data, or removes it when data is nil.
func ensureOrRemove(p *hostenv.Pass, name string, data []byte) error {
	var err error
	if data == nil {
		_, err = p.RemoveFile(name)
	} else {
		_, err = p.EnsureFile(name, data, 0o644)
	}
	return err
}
