package nvidia

import (
	"context"

	"github.com/better-compute/better-compute/hostconverge/debpkg"
	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// FabricManagerService is the systemd service of the fabric manager.
const FabricManagerService = "nvidia-fabricmanager"

// FabricManager converges the fabric-manager unit: the fabric manager package of the
// installed driver's branch (nvidia-fabricmanager-580), at the driver's version, and its
// service enabled and running (restarted when its package changed). It waits with a
// reboot while the loaded driver is not the installed one, which the fabric manager
// refuses to run with.
func FabricManager(ctx context.Context, p *hostenv.Pass, _ *hostunit.FabricManager) error {
	pkgs, err := debpkg.Installed(p)
	if err != nil {
		return err
	}
	branch, driverVersion, err := installedBranch(pkgs)
	if err != nil {
		return err
	}
	want := "nvidia-fabricmanager-" + branch
	installedNow := false
	if v, ok := pkgs[want]; !ok || debpkg.Upstream(v) != debpkg.Upstream(driverVersion) {
		if err := debpkg.Install(ctx, p, want); err != nil {
			return err
		}
		if pkgs, err = debpkg.Installed(p); err != nil {
			return err
		}
		installedNow = true
	}
	version := debpkg.Upstream(pkgs[want])
	if version != debpkg.Upstream(driverVersion) {
		return proto.Errorf(proto.DriverError, "%s is at %q, the driver at %s: the package archive lacks the fabric manager of the driver's version", want, version, debpkg.Upstream(driverVersion))
	}
	loaded, err := loadedDriver(p)
	if err != nil {
		return err
	}
	if loaded.version != version {
		p.RebootFor("the fabric manager %s starts once the driver %s is loaded", version, version)
		return nil
	}
	restartFor := ""
	if installedNow {
		restartFor = "its new package"
	}
	return p.EnsureService(ctx, FabricManagerService, restartFor)
}
