package kernel

import (
	"bufio"
	"bytes"
	"context"
	"strings"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// ProcCPUInfo names the CPU vendor.
const ProcCPUInfo = "/proc/cpuinfo"

// IOMMU converges the iommu unit. Passthrough turns the vendor's IOMMU on
// (intel_iommu=on or amd_iommu=on, by the CPU vendor of /proc/cpuinfo) in passthrough mode
// (iommu=pt) on the kernel command line, which takes a reboot. Without passthrough the
// unit's parameters are dropped and the kernel's defaults apply.
func IOMMU(ctx context.Context, p *hostenv.Pass, s *hostunit.IOMMU) error {
	var params []string
	if s.Passthrough {
		data, err := p.ReadFile(ProcCPUInfo)
		if err != nil {
			return err
		}
		switch vendor := CPUVendor(data); vendor {
		case "GenuineIntel":
			params = []string{"intel_iommu=on", "iommu=pt"}
		case "AuthenticAMD":
			params = []string{"amd_iommu=on", "iommu=pt"}
		default:
			return proto.Errorf(proto.Unsupported, "CPU vendor %q: bcd knows the IOMMU parameters of GenuineIntel and AuthenticAMD", vendor)
		}
	}
	return setBootParams(ctx, p, hostunit.UnitIOMMU, params)
}

// CPUVendor returns the vendor_id of the first processor in /proc/cpuinfo, "" when it
// names none.
func CPUVendor(cpuinfo []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(key) == "vendor_id" {
			return strings.TrimSpace(value)
		}
	}
	return ""
}
