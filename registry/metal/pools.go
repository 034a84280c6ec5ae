package metal

import (
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
	"github.com/better-compute/better-compute/registry/store"
)

// poolUnit is a pool policy field that holds a host-config unit.
type poolUnit struct {
	field string
	unit  string
	get   func(*store.MetalPolicy) json.RawMessage
}

// poolUnits are the policy fields whose unit replaces a profile's, in the order the
// units apply.
var poolUnits = []poolUnit{
	{"kernelModules", hostunit.UnitKernelModules, func(p *store.MetalPolicy) json.RawMessage { return p.KernelModules }},
	{"hugepages", hostunit.UnitHugepages, func(p *store.MetalPolicy) json.RawMessage { return p.Hugepages }},
	{"cpu", hostunit.UnitCPU, func(p *store.MetalPolicy) json.RawMessage { return p.CPU }},
	{"iommu", hostunit.UnitIOMMU, func(p *store.MetalPolicy) json.RawMessage { return p.IOMMU }},
	{"gpu", hostunit.UnitGPUSettings, func(p *store.MetalPolicy) json.RawMessage { return p.GPU }},
	{"gpuSharing", hostunit.UnitGPUSharing, func(p *store.MetalPolicy) json.RawMessage { return p.GPUSharing }},
	{"kubernetes", hostunit.UnitK8sJoin, func(p *store.MetalPolicy) json.RawMessage { return p.Kubernetes }},
}

// SetPool stores a pool's site and metal policy, creating the pool if it is new. The
// hardware profile must be one the registry knows and each unit must pass its unit's
// checks; a problem is INVALID_INPUT at its path under policy.
func (s *Service) SetPool(tx *store.Tx, pool store.MetalPool) (store.MetalPool, error) {
	if _, err := s.cfg.HardwareProfiles.lookup(pool.Policy.HardwareProfile); err != nil {
		return pool, proto.AsError(err).WithPath("policy.hardwareProfile")
	}
	for _, u := range poolUnits {
		raw := u.get(&pool.Policy)
		if raw == nil {
			continue
		}
		if problems := hostunit.Validate(u.unit, raw); len(problems) > 0 {
			path := "policy." + u.field
			if p := problems[0].Path; p != "" {
				path += "." + string(p)
			}
			return pool, proto.Errorf(proto.InvalidInput, "%s (the %s unit): %s", "policy."+u.field, u.unit, problems[0].Message).WithPath(path)
		}
	}
	return tx.PutMetalPool(pool)
}
