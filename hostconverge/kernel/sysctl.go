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

// SysctlConf holds the unit's values for every boot (systemd-sysctl reads it).
const SysctlConf = "/etc/sysctl.d/90-better-compute.conf"

// Sysctl converges the sysctl unit: it refuses the whole unit, before writing anything,
// when a value is one hostunit refuses; else it writes the values for the next boots and
// sets each live value under /proc/sys that differs. A sysctl this kernel lacks fails the
// unit after the others are set.
func Sysctl(ctx context.Context, p *hostenv.Pass, s *hostunit.Sysctl) error {
	names := slices.Sorted(maps.Keys(s.Values))
	for _, name := range names {
		if why := hostunit.RefusedSysctl(name, s.Values[name]); why != "" {
			return proto.Errorf(proto.InvalidConfig, "%s", why).WithPath(name)
		}
	}
	var conf []byte
	if len(names) > 0 {
		var b strings.Builder
		b.WriteString(header("sysctl"))
		for _, name := range names {
			b.WriteString(confName(name) + " = " + s.Values[name] + "\n")
		}
		conf = []byte(b.String())
	}
	fileErr := ensureOrRemove(p, SysctlConf, conf)
	var errs []error
	for _, name := range names {
		if err := setSysctl(p, name, s.Values[name]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append([]error{fileErr}, errs...)...)
}

// setSysctl sets one live value when it differs, comparing words (the kernel separates
// the numbers of a vector with tabs).
func setSysctl(p *hostenv.Pass, name, want string) error {
	file := SysctlPath(name)
	if ok, err := p.Exists(file); err != nil {
		return err
	} else if !ok {
		return proto.Errorf(proto.Unsupported, "this kernel has no sysctl %s (%s)", name, file)
	}
	cur, err := p.ReadValue(file)
	if err != nil {
		return err
	}
	if strings.Join(strings.Fields(cur), " ") == strings.Join(strings.Fields(want), " ") {
		return nil
	}
	if err := p.WriteValue(file, want); err != nil {
		return err
	}
	p.Corrected("set %s %s -> %s", name, strings.Join(strings.Fields(cur), " "), want)
	return nil
}

// SysctlPath is the /proc/sys file of a sysctl name: dots become slashes and slashes
// dots, so net.ipv4.conf.eth0/100.rp_filter is /proc/sys/net/ipv4/conf/eth0.100/rp_filter.
func SysctlPath(name string) string {
	return "/proc/sys/" + strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, name)
}

// confName is how sysctl.d spells name: as given, or as its path under /proc/sys when a
// part holds a dot (written / in the unit), which sysctl.d reads literally once the name
// starts with a slash-separated part.
func confName(name string) string {
	if strings.Contains(name, "/") {
		return strings.TrimPrefix(SysctlPath(name), "/proc/sys/")
	}
	return name
}
