package api

import (
	"encoding/json"
	"time"

	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
)

// AgentBCD is a pool's agent when its policy names none: its machines boot the ramdisk
// and run bcd once installed.
const AgentBCD = store.AgentBCD

// Pool is a tenant's pool of machines at a site, as the API shows it.
type Pool struct {
	Tenant    string     `json:"tenantId"`
	Name      string     `json:"name"`
	Site      string     `json:"siteId"`
	Policy    PoolPolicy `json:"policy"`
	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
}

// PoolPolicy is what a pool asks of its site and its machines, as pools.create and
// pools.update take it and the pool answers show it (docs/host-units.md has the units).
type PoolPolicy struct {
	// PrewarmImages are catalog refs the site's cache should hold before any deploy asks
	// for them.
	PrewarmImages []string `json:"prewarmImages"`
	// ImageSources narrow the site's image sources for this pool's pre-warm images and
	// its machines' fetches from an image's source.
	ImageSources []string `json:"imageSources,omitempty"`
	// RamdiskExtras are catalog refs of ramdisk images every ramdisk boot of the pool's
	// machines appends after the ramdisk's own, in this order.
	RamdiskExtras []string `json:"ramdiskExtras,omitempty"`
	// SecureBoot: the pool's machines boot with UEFI Secure Boot on, so the site boots
	// their ramdisk through the signed chain (shim, GRUB) instead of iPXE.
	SecureBoot bool `json:"secureBoot,omitempty"`
	// HardwareProfile names the hardware profile of the pool's machines.
	HardwareProfile string `json:"hardwareProfile,omitempty"`
	// Agent is bcd ("" reads as bcd) or none.
	Agent string `json:"agent,omitempty"`
	// Enrollment is trust ("" reads as trust), inspect or commission.
	Enrollment string `json:"enrollment,omitempty"`
	// TrustProvisioningNetwork binds at once the MAC PXE discovery proposes.
	TrustProvisioningNetwork bool `json:"trustProvisioningNetwork,omitempty"`
	// RequireGPUs makes commissioning fail on a machine without a GPU.
	RequireGPUs   bool            `json:"requireGpus,omitempty"`
	Hugepages     json.RawMessage `json:"hugepages,omitempty"`
	KernelModules json.RawMessage `json:"kernelModules,omitempty"`
	CPU           json.RawMessage `json:"cpu,omitempty"`
	IOMMU         json.RawMessage `json:"iommu,omitempty"`
	GPU           json.RawMessage `json:"gpu,omitempty"`
	Kubernetes    json.RawMessage `json:"kubernetes,omitempty"`
	GPUSharing    json.RawMessage `json:"gpuSharing,omitempty"`
	MIGLayout     json.RawMessage `json:"migLayout,omitempty"`
	// Remediation is when the registry remediates the pool's active nodes by itself;
	// nil never.
	Remediation *RemediationPolicy `json:"remediation,omitempty"`
	// MeasuredBoot is the pool's measured-boot policy (docs/attestation.md); nil is off.
	MeasuredBoot *MeasuredBootPolicy `json:"measuredBoot,omitempty"`
}

// MeasuredBootPolicy is a pool's measured-boot policy: mode off, record, tofu or golden;
// the PCRs compared (0, 2, 4 and 7 when none); golden's values, a PCR's index to its
// SHA-256 value in hex.
type MeasuredBootPolicy struct {
	Mode   string            `json:"mode,omitempty"`
	PCRs   []int             `json:"pcrs,omitempty"`
	Golden map[string]string `json:"golden,omitempty"`
}

// RemediationPolicy is a pool's automatic health remediation: durations like 15m.
type RemediationPolicy struct {
	AgentGoneAfter string `json:"agentGoneAfter,omitempty"`
	Backoff        string `json:"backoff,omitempty"`
}

// Units are the host-config units the policy sets, in the order the units apply.
func (p PoolPolicy) Units() []HostUnit {
	var out []HostUnit
	for _, u := range metal.PoolUnits(p.stored()) {
		out = append(out, HostUnit(u))
	}
	return out
}

// stored is the policy as the store keeps it.
func (p PoolPolicy) stored() store.PoolPolicy {
	s := store.PoolPolicy{PrewarmImages: p.PrewarmImages, ImageSources: p.ImageSources, RamdiskExtras: p.RamdiskExtras, SecureBoot: p.SecureBoot,
		HardwareProfile: p.HardwareProfile, Agent: p.Agent, Enrollment: p.Enrollment, TrustProvisioningNetwork: p.TrustProvisioningNetwork,
		RequireGPUs: p.RequireGPUs, Hugepages: p.Hugepages, KernelModules: p.KernelModules, CPU: p.CPU, IOMMU: p.IOMMU, GPU: p.GPU,
		Kubernetes: p.Kubernetes, GPUSharing: p.GPUSharing, MIGLayout: p.MIGLayout}
	if p.Remediation != nil {
		r := store.RemediationPolicy(*p.Remediation)
		s.Remediation = &r
	}
	if p.MeasuredBoot != nil {
		m := store.MeasuredBootPolicy(*p.MeasuredBoot)
		s.MeasuredBoot = &m
	}
	return s
}

func policyOf(s store.PoolPolicy) PoolPolicy {
	p := PoolPolicy{PrewarmImages: s.PrewarmImages, ImageSources: s.ImageSources, RamdiskExtras: s.RamdiskExtras, SecureBoot: s.SecureBoot,
		HardwareProfile: s.HardwareProfile, Agent: s.Agent, Enrollment: s.Enrollment, TrustProvisioningNetwork: s.TrustProvisioningNetwork,
		RequireGPUs: s.RequireGPUs, Hugepages: s.Hugepages, KernelModules: s.KernelModules, CPU: s.CPU, IOMMU: s.IOMMU, GPU: s.GPU,
		Kubernetes: s.Kubernetes, GPUSharing: s.GPUSharing, MIGLayout: s.MIGLayout}
	if s.Remediation != nil {
		r := RemediationPolicy(*s.Remediation)
		p.Remediation = &r
	}
	if s.MeasuredBoot != nil {
		m := MeasuredBootPolicy(*s.MeasuredBoot)
		p.MeasuredBoot = &m
	}
	return p
}

func poolOf(p store.Pool) Pool {
	return Pool{Tenant: p.Tenant, Name: p.Name, Site: p.Site, Policy: policyOf(p.Policy), CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
}
