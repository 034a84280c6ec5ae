package debpkg

import (
	"bufio"
	"bytes"
	"context"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
)

// OSRelease is where the host names its distribution.
const OSRelease = "/etc/os-release"

// Installed returns the host's installed packages and their versions. A host that is not
// Debian or Ubuntu (by /etc/os-release) is UNSUPPORTED: these are the distributions bcd
// installs packages on.
func Installed(p *hostenv.Pass) (map[string]string, error) {
	if err := checkDebian(p); err != nil {
		return nil, err
	}
	return Recorded(p)
}

// Recorded is what dpkg's status file records as installed, package to version, on any
// host: none where the file is not (a host without dpkg). Installed is it on a host
// whose packages bcd installs.
func Recorded(p *hostenv.Pass) (map[string]string, error) {
	data, found, err := p.ReadOptional(StatusFile)
	if err != nil || !found {
		return map[string]string{}, err
	}
	pkgs, err := ParseStatus(data)
	if err != nil {
		return nil, proto.Errorf(proto.DriverError, "%s: %v", StatusFile, err)
	}
	return pkgs, nil
}

// keepConffiles are dpkg's options for a conffile the host changed: where the package
// changed it too, dpkg would ask which to keep, and bcd's programs read no terminal, so
// dpkg would read end of file at the prompt and fail the package (and the unit, on every
// pass). The host's file is kept where dpkg would ask (confold), and dpkg's default taken
// where it has one (confdef: the package's new file for one the host never changed).
var keepConffiles = []string{"--force-confdef", "--force-confold"}

// Install installs packages with apt-get (after refreshing the package lists, and
// finishing an interrupted dpkg run), keeping the host's changed conffiles, and records
// "installed ...". apt-get replaces packages the new ones conflict with, such as another
// driver branch.
func Install(ctx context.Context, p *hostenv.Pass, packages ...string) error {
	if err := finishInterrupted(ctx, p); err != nil {
		return err
	}
	if _, err := p.Run(ctx, "apt-get", "update", "-q"); err != nil {
		return err
	}
	args := []string{"install", "-y", "-q", "--no-install-recommends"}
	for _, force := range keepConffiles {
		args = append(args, "-o", "Dpkg::Options::="+force)
	}
	args = append(args, packages...)
	_, err := p.Change(ctx, "installed "+strings.Join(packages, ", "), "apt-get", args...)
	return err
}

// checkDebian refuses a host whose os-release names neither Debian nor Ubuntu, by ID or
// ID_LIKE.
func checkDebian(p *hostenv.Pass) error {
	data, found, err := p.ReadOptional(OSRelease)
	if err != nil {
		return err
	}
	id := "unknown"
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), "=")
		if !ok || key != "ID" && key != "ID_LIKE" {
			continue
		}
		value = strings.Trim(value, `"'`)
		if key == "ID" {
			id = value
		}
		if slices.ContainsFunc(strings.Fields(value), func(s string) bool { return s == "debian" || s == "ubuntu" }) {
			return nil
		}
	}
	if !found {
		id = "without " + OSRelease
	}
	return proto.Errorf(proto.Unsupported, "bcd installs packages with apt-get on Debian and Ubuntu; this host is %s", id)
}

// finishInterrupted runs dpkg --configure -a when dpkg's journal holds a run that did not
// finish: an install killed half-way (the unit out of its time, bcd's service stopped)
// leaves it, and apt-get refuses every install until it is finished.
func finishInterrupted(ctx context.Context, p *hostenv.Pass) error {
	entries, err := p.Glob(Journal + "/[0-9]*")
	if err != nil || len(entries) == 0 {
		return err
	}
	args := append(slices.Clone(keepConffiles), "--configure", "-a")
	_, err = p.Change(ctx, "finished dpkg's interrupted run", "dpkg", args...)
	return err
}
