package store

import (
	"encoding/json"
	"regexp"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Agents a pool's machines run.
const (
	// AgentBCD: the machines boot the ramdisk and run bcd once installed (the default).
	AgentBCD = "bcd"
	// AgentNone: the machines never run bcd; only out-of-band steps reach them.
	AgentNone = "none"
)

// MetalPool is a tenant's pool of machines at one site, with the policy metal reads:
// the hardware profile, the agent its machines run and the host-config units that
// replace a deployed profile's.
type MetalPool struct {
	Tenant    string      `json:"tenantId"`
	Name      string      `json:"name"`
	Site      string      `json:"siteId"`
	Policy    MetalPolicy `json:"policy"`
	CreatedAt time.Time   `json:"createdAt"`
	UpdatedAt time.Time   `json:"updatedAt"`
}

// MetalPolicy is the part of a pool's policy that metal reads. Each unit field holds the
// settings of one host-config unit (see docs/host-units.md) and replaces that unit of a
// profile's hostConfig on the pool's nodes.
type MetalPolicy struct {
	// HardwareProfile names the hardware profile of the pool's machines (a node's own
	// wins).
	HardwareProfile string `json:"hardwareProfile,omitempty"`
	// Agent is bcd ("" reads as bcd) or none.
	Agent         string          `json:"agent,omitempty"`
	Hugepages     json.RawMessage `json:"hugepages,omitempty"`
	KernelModules json.RawMessage `json:"kernelModules,omitempty"`
	CPU           json.RawMessage `json:"cpu,omitempty"`
	IOMMU         json.RawMessage `json:"iommu,omitempty"`
	// GPU holds gpu-settings.
	GPU json.RawMessage `json:"gpu,omitempty"`
	// Kubernetes holds k8s-join.
	Kubernetes json.RawMessage `json:"kubernetes,omitempty"`
	// GPUSharing holds gpu-sharing: a pool shared by mps or timeslice.
	GPUSharing json.RawMessage `json:"gpuSharing,omitempty"`
}

const bucketMetalPools = "metal_pools"

// poolName is the charset of pool and site names.
var poolName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// PutMetalPool stores a pool of its tenant, or replaces its site and policy. Names, the
// site and the agent are checked here; the units' settings are the caller's to check.
func (t *Tx) PutMetalPool(p MetalPool) (MetalPool, error) {
	if !poolName.MatchString(p.Name) {
		return p, proto.Errorf(proto.InvalidInput, "pool name %q: use 1 to 63 lower-case letters, digits and hyphens, starting with a letter", p.Name).WithPath("pool")
	}
	if !poolName.MatchString(p.Site) {
		return p, proto.Errorf(proto.InvalidInput, "site %q: use 1 to 63 lower-case letters, digits and hyphens, starting with a letter", p.Site).WithPath("siteId")
	}
	if a := p.Policy.Agent; a != "" && a != AgentBCD && a != AgentNone {
		return p, proto.Errorf(proto.InvalidInput, "agent %q: use bcd or none", a).WithPath("policy.agent")
	}
	if _, err := t.Tenant(p.Tenant); err != nil {
		return p, err
	}
	old, err := t.MetalPool(p.Tenant, p.Name)
	switch {
	case err == nil:
		p.CreatedAt = old.CreatedAt
	case proto.CodeOf(err) == proto.NotFound:
		p.CreatedAt = t.now
	default:
		return p, err
	}
	p.UpdatedAt = t.now
	return p, t.put(bucketMetalPools, metalPoolKey(p.Tenant, p.Name), p)
}

// MetalPool returns one pool of tenant, NOT_FOUND when it has none of that name.
func (t *Tx) MetalPool(tenant, name string) (MetalPool, error) {
	var p MetalPool
	ok, err := t.get(bucketMetalPools, metalPoolKey(tenant, name), &p)
	if err == nil && !ok {
		err = notFound("pool", name)
	}
	return p, err
}

func metalPoolKey(tenant, name string) []byte { return []byte(tenant + "\x00" + name) }
