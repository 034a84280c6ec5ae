package kernel

import (
	"context"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
)

// GRUBDefaults is GRUB's settings file; a host without it does not boot with GRUB.
const GRUBDefaults = "/etc/default/grub"

// DropIn is the GRUB drop-in through which unit sets kernel parameters. Each unit owns
// its own file, so that units never undo each other's parameters.
func DropIn(unit string) string { return "/etc/default/grub.d/90-better-compute-" + unit + ".cfg" }

// cmdlineVar is the GRUB variable the drop-ins append to: the parameters of the normal
// boot entries, not of the recovery ones.
const cmdlineVar = "GRUB_CMDLINE_LINUX_DEFAULT"

// renderDropIn writes a drop-in appending params to the kernel command line.
func renderDropIn(unit string, params []string) []byte {
	return []byte("# Kernel parameters of the better-compute host-config unit " + unit + ".\n" +
		"# bcd rewrites this file; change the unit instead.\n" +
		cmdlineVar + `="${` + cmdlineVar + `:+$` + cmdlineVar + ` }` + strings.Join(params, " ") + "\"\n")
}

// dropInParams returns the parameters a drop-in written by renderDropIn appends.
func dropInParams(data []byte) []string {
	for line := range strings.SplitSeq(string(data), "\n") {
		if value, ok := strings.CutPrefix(line, cmdlineVar+"="); ok {
			if i := strings.LastIndexByte(value, '}'); i >= 0 {
				return strings.Fields(strings.Trim(value[i+1:], `"`))
			}
		}
	}
	return nil
}

// setBootParams makes the next boot's kernel command line carry params, and no other
// parameter of unit: it writes (or, for no params, removes) the unit's drop-in and runs
// update-grub when the drop-in changed, or an earlier pass changed it and did not see
// update-grub succeed (hostenv's ChangeFile). When update-grub fails, the drop-in is put
// back as it was, so the next pass tries again. It records a reboot when the running kernel's
// command line lacks one of params, or still has one the change dropped.
func setBootParams(ctx context.Context, p *hostenv.Pass, unit string, params []string) error {
	name := DropIn(unit)
	old, existed, err := p.ReadOptional(name)
	if err != nil {
		return err
	}
	pending, err := p.Pending(name)
	if err != nil {
		return err
	}
	if len(params) == 0 && !existed && !pending {
		return nil
	}
	if ok, err := p.Exists(GRUBDefaults); err != nil {
		return err
	} else if !ok {
		return proto.Errorf(proto.Unsupported, "the host has no %s: bcd sets kernel parameters through GRUB drop-ins only", GRUBDefaults)
	}
	var data []byte
	if len(params) > 0 {
		data = renderDropIn(unit, params)
	}
	// A drop-in a killed pass wrote is due for update-grub too: as it is on disk, the
	// next boot's command line does not have it until update-grub runs.
	changed, err := p.ChangeFile(name, data, 0o644)
	if err != nil {
		return err
	}
	if changed {
		if _, err := p.Change(ctx, "ran update-grub", "update-grub"); err != nil {
			return restoreDropIn(p, name, old, existed, err)
		}
		if err := p.Applied(name); err != nil {
			return err
		}
	}
	running, err := p.ReadFile(ProcCmdline)
	if err != nil {
		return err
	}
	booted := ParseCmdline(string(running))
	var missing, stale []string
	for _, param := range params {
		if !slices.Contains(booted, param) {
			missing = append(missing, param)
		}
	}
	for _, param := range dropInParams(old) {
		if changed && !slices.Contains(params, param) && slices.Contains(booted, param) {
			stale = append(stale, param)
		}
	}
	if len(missing) > 0 {
		p.RebootFor("the running kernel lacks %s", strings.Join(missing, " "))
	}
	if len(stale) > 0 {
		p.RebootFor("the running kernel still has %s", strings.Join(stale, " "))
	}
	return nil
}

// restoreDropIn puts back the drop-in a failed update-grub was to apply, and returns
// cause with whatever the restore met.
func restoreDropIn(p *hostenv.Pass, name string, old []byte, existed bool, cause error) error {
	var err error
	if existed {
		_, err = p.EnsureFile(name, old, 0o644)
	} else {
		_, err = p.RemoveFile(name)
	}
	if err != nil {
		return proto.Errorf(proto.DriverError, "%v; putting %s back failed too: %w", cause, name, err)
	}
	return cause
}
