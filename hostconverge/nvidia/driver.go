package nvidia

import (
	"context"
	"regexp"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/hostconverge/debpkg"
	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// DriverPackage is the Debian and Ubuntu package of a driver branch: nvidia-driver-580,
// or nvidia-driver-580-open for the open kernel modules.
func DriverPackage(s *hostunit.NvidiaDriver) string {
	if s.Open {
		return "nvidia-driver-" + s.Branch + "-open"
	}
	return "nvidia-driver-" + s.Branch
}

// driverPackage matches the driver packages DriverPackage names.
var driverPackage = regexp.MustCompile(`^nvidia-driver-([0-9]{3})(-open)?$`)

// Driver converges the nvidia-driver unit: it installs the branch's package when it is
// not installed (apt-get replaces another branch or flavour), and records a reboot while
// the loaded kernel module is absent, of another version, or of the other flavour.
func Driver(ctx context.Context, p *hostenv.Pass, s *hostunit.NvidiaDriver) error {
	pkgs, err := debpkg.Installed(p)
	if err != nil {
		return err
	}
	want := DriverPackage(s)
	if _, ok := pkgs[want]; !ok {
		if err := debpkg.Install(ctx, p, want); err != nil {
			return err
		}
		if pkgs, err = debpkg.Installed(p); err != nil {
			return err
		}
	}
	installed, ok := pkgs[want]
	if !ok {
		return proto.Errorf(proto.DriverError, "apt-get succeeded but %s is not installed", want)
	}
	loaded, err := loadedDriver(p)
	switch {
	case err != nil:
		return err
	case loaded.version == "":
		p.RebootFor("no NVIDIA driver is loaded; %s %s loads at boot", want, debpkg.Upstream(installed))
	case loaded.version != debpkg.Upstream(installed):
		p.RebootFor("the loaded driver is %s, the installed one %s", loaded.version, debpkg.Upstream(installed))
	case loaded.open != s.Open:
		p.RebootFor("the loaded driver has the %s kernel modules, the unit wants the %s ones", flavour(loaded.open), flavour(s.Open))
	}
	return nil
}

func flavour(open bool) string {
	if open {
		return "open"
	}
	return "proprietary"
}

// driver is the loaded kernel module; version is "" when none is loaded.
type driver struct {
	version string
	open    bool
}

func loadedDriver(p *hostenv.Pass) (driver, error) {
	data, found, err := p.ReadOptional(ProcDriverVersion)
	if err != nil || !found {
		return driver{}, err
	}
	version, open, ok := ParseDriverVersion(string(data))
	if !ok {
		return driver{}, proto.Errorf(proto.DriverError, "%s names no driver version", ProcDriverVersion)
	}
	return driver{version, open}, nil
}

// installedBranch returns the branch and package version of the one installed driver
// package; none, or more than one, is an error naming what to do.
func installedBranch(pkgs map[string]string) (branch, version string, err error) {
	var names []string
	for name := range pkgs {
		if driverPackage.MatchString(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	switch len(names) {
	case 0:
		return "", "", proto.Errorf(proto.InvalidState, "no NVIDIA driver package is installed; add the nvidia-driver unit")
	case 1:
		return driverPackage.FindStringSubmatch(names[0])[1], pkgs[names[0]], nil
	}
	return "", "", proto.Errorf(proto.InvalidState, "several NVIDIA driver packages are installed (%s); remove all but one", strings.Join(names, ", "))
}
