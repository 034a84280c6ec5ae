package hostconverge

import (
	"context"
	"time"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/hostconverge/k8s"
	"github.com/better-compute/better-compute/hostconverge/kernel"
	"github.com/better-compute/better-compute/hostconverge/nvidia"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// implementation is how bcd applies one unit, and how long one application may take.
type implementation struct {
	apply   func(ctx context.Context, p *hostenv.Pass, s hostunit.Settings) error
	timeout time.Duration
}

// typed adapts a unit's function over its own settings type.
func typed[S hostunit.Settings](f func(context.Context, *hostenv.Pass, S) error) func(context.Context, *hostenv.Pass, hostunit.Settings) error {
	return func(ctx context.Context, p *hostenv.Pass, s hostunit.Settings) error { return f(ctx, p, s.(S)) }
}

// implementations are the units bcd knows, by name. Package installs get the longest
// time; the others read and write a few files or ask nvidia-smi.
var implementations = map[string]implementation{
	hostunit.UnitKernelModules:    {typed(kernel.Modules), 2 * time.Minute},
	hostunit.UnitSysctl:           {typed(kernel.Sysctl), time.Minute},
	hostunit.UnitHugepages:        {typed(kernel.Hugepages), 5 * time.Minute},
	hostunit.UnitCPU:              {typed(kernel.CPU), 5 * time.Minute},
	hostunit.UnitIOMMU:            {typed(kernel.IOMMU), 5 * time.Minute},
	hostunit.UnitNvidiaDriver:     {typed(nvidia.Driver), 30 * time.Minute},
	hostunit.UnitFabricManager:    {typed(nvidia.FabricManager), 10 * time.Minute},
	hostunit.UnitGPUSettings:      {typed(nvidia.GPUSettings), 5 * time.Minute},
	hostunit.UnitMIGLayout:        {typed(nvidia.MIGLayout), 10 * time.Minute},
	hostunit.UnitGPUSharing:       {typed(nvidia.GPUSharing), 2 * time.Minute},
	hostunit.UnitContainerToolkit: {typed(nvidia.ContainerToolkit), 10 * time.Minute},
	hostunit.UnitK8sJoin:          {typed(k8s.Join), 10 * time.Minute},
}
