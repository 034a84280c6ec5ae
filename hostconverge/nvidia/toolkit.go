package nvidia

import (
	"context"
	"strings"

	"github.com/better-compute/better-compute/hostconverge/debpkg"
	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// The files and package of the container-toolkit unit.
const (
	ToolkitPackage = "nvidia-container-toolkit"
	// CDISpec is the Container Device Interface spec of the GPUs, which nvidia-ctk writes.
	CDISpec = "/etc/cdi/nvidia.yaml"
	// CDIStamp records the driver version CDISpec was generated for.
	CDIStamp = "/var/lib/better-compute/host/cdi-driver-version"
)

// ContainerToolkit converges the container-toolkit unit: the toolkit package installed,
// and with cdi the GPUs' CDI spec generated when it is missing or was generated for
// another driver version than the loaded one. Without cdi, bcd's spec is removed. While
// no driver is loaded, the spec waits for the reboot that loads it.
func ContainerToolkit(ctx context.Context, p *hostenv.Pass, s *hostunit.ContainerToolkit) error {
	pkgs, err := debpkg.Installed(p)
	if err != nil {
		return err
	}
	if _, ok := pkgs[ToolkitPackage]; !ok {
		if err := debpkg.Install(ctx, p, ToolkitPackage); err != nil {
			return err
		}
	}
	if !s.CDI {
		if _, err := p.RemoveFile(CDISpec); err != nil {
			return err
		}
		_, err := p.RemoveFile(CDIStamp)
		return err
	}
	loaded, err := loadedDriver(p)
	if err != nil {
		return err
	}
	if loaded.version == "" {
		if _, _, err := installedBranch(pkgs); err != nil {
			return err
		}
		p.RebootFor("no NVIDIA driver is loaded; the CDI spec is generated once it is")
		return nil
	}
	exists, err := p.Exists(CDISpec)
	if err != nil {
		return err
	}
	stamp, _, err := p.ReadOptional(CDIStamp)
	if err != nil {
		return err
	}
	if exists && strings.TrimSpace(string(stamp)) == loaded.version {
		return nil
	}
	if _, err := p.Change(ctx, "generated "+CDISpec+" for driver "+loaded.version, "nvidia-ctk", "cdi", "generate", "--output="+CDISpec); err != nil {
		return err
	}
	_, err = p.EnsureFile(CDIStamp, []byte(loaded.version+"\n"), 0o644)
	return err
}
