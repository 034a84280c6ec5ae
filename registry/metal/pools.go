package metal

import (
	"encoding/json"
	"strings"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
	"github.com/better-compute/better-compute/registry/store"
)

// poolUnit is a pool policy field that holds a host-config unit.
type poolUnit struct {
	field string
	unit  string
	get   func(*store.PoolPolicy) json.RawMessage
}

// poolUnits are the policy fields whose unit replaces a profile's, in the order the
// units apply.
var poolUnits = []poolUnit{
	{"kernelModules", hostunit.UnitKernelModules, func(p *store.PoolPolicy) json.RawMessage { return p.KernelModules }},
	{"hugepages", hostunit.UnitHugepages, func(p *store.PoolPolicy) json.RawMessage { return p.Hugepages }},
	{"cpu", hostunit.UnitCPU, func(p *store.PoolPolicy) json.RawMessage { return p.CPU }},
	{"iommu", hostunit.UnitIOMMU, func(p *store.PoolPolicy) json.RawMessage { return p.IOMMU }},
	{"gpu", hostunit.UnitGPUSettings, func(p *store.PoolPolicy) json.RawMessage { return p.GPU }},
	{"gpuSharing", hostunit.UnitGPUSharing, func(p *store.PoolPolicy) json.RawMessage { return p.GPUSharing }},
	{"kubernetes", hostunit.UnitK8sJoin, func(p *store.PoolPolicy) json.RawMessage { return p.Kubernetes }},
}

// PoolUnits are the host-config units a pool's policy sets, in the order the units
// apply: each replaces the deployed profile's unit of the same name.
func PoolUnits(policy store.PoolPolicy) []store.HostUnit {
	var out []store.HostUnit
	for _, u := range poolUnits {
		if raw := u.get(&policy); raw != nil {
			out = append(out, store.HostUnit{Unit: u.unit, Settings: raw})
		}
	}
	return out
}

// CheckPoolPolicy checks the part of a pool's policy that metal reads: the hardware
// profile must be one the registry knows, policy.remediation's durations must parse,
// policy.migLayout must be a mig-layout unit's layout, and each unit must pass its unit's
// checks. A
// problem is INVALID_INPUT at its path under policy (policy.hugepages.pages1g). The
// store checks the agent, and the API the pre-warm refs.
func (s *Service) CheckPoolPolicy(policy store.PoolPolicy) error {
	if _, err := s.cfg.HardwareProfiles.lookup(policy.HardwareProfile); err != nil {
		return proto.AsError(err).WithPath("policy.hardwareProfile")
	}
	if err := checkRemediationPolicy(policy.Remediation); err != nil {
		return err
	}
	if err := checkMeasuredBootPolicy(policy.MeasuredBoot); err != nil {
		return err
	}
	if policy.MIGLayout != nil {
		doc := mustJSON(map[string]json.RawMessage{"layout": policy.MIGLayout})
		if problems := hostunit.Validate(hostunit.UnitMIGLayout, doc); len(problems) > 0 {
			path := "policy.migLayout" + strings.TrimPrefix(string(problems[0].Path), "layout")
			return proto.Errorf(proto.InvalidInput, "policy.migLayout (the mig-layout unit's layout): %s", problems[0].Message).WithPath(path)
		}
	}
	for _, u := range poolUnits {
		raw := u.get(&policy)
		if raw == nil {
			continue
		}
		if problems := hostunit.Validate(u.unit, raw); len(problems) > 0 {
			path := "policy." + u.field
			if p := problems[0].Path; p != "" {
				path += "." + string(p)
			}
			return proto.Errorf(proto.InvalidInput, "%s (the %s unit): %s", "policy."+u.field, u.unit, problems[0].Message).WithPath(path)
		}
	}
	return nil
}
