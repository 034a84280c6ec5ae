package store

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Pool is a tenant's group of machines at one site, with the policy they share.
type Pool struct {
	Tenant    string     `json:"tenantId"`
	Name      string     `json:"name"`
	Site      string     `json:"siteId"`
	Policy    PoolPolicy `json:"policy"`
	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
}

// PoolPolicy is what a pool asks of its site and its machines: the images the site's
// cache pre-warms, the hardware profile, the agent the machines run and the host-config
// units that replace a deployed profile's. Each unit field holds the settings of one
// host-config unit (see docs/host-units.md).
type PoolPolicy struct {
	// PrewarmImages are catalog refs (name@version, or TENANT/name@version for another
	// tenant's public image), resolved as the pool's tenant resolves a profile's image, that
	// the site's cache should hold before any deploy asks for them.
	PrewarmImages []string `json:"prewarmImages"`
	// ImageSources narrow the site's image sources for this pool's pre-warm images and
	// its machines' deploys (a ramdisk's fetch from an image's source): when set, a source
	// must match both lists.
	ImageSources []string `json:"imageSources,omitempty"`
	// RamdiskExtras are catalog refs of images of kind ramdisk, resolved as the pool's
	// tenant resolves a pre-warm ref: extra initrds (the NVIDIA driver and DCGM, say) that
	// every ramdisk boot of the pool's machines appends after the ramdisk's own, in this
	// order. The site's cache holds them as it holds pre-warm images.
	RamdiskExtras []string `json:"ramdiskExtras,omitempty"`
	// SecureBoot says the pool's machines boot with UEFI Secure Boot on: their ramdisk
	// boots go through the signed chain the site serves (shim, GRUB, the signed kernel)
	// rather than iPXE, which their firmware would refuse.
	SecureBoot bool `json:"secureBoot,omitempty"`
	// HardwareProfile names the hardware profile of the pool's machines (a node's own
	// wins).
	HardwareProfile string `json:"hardwareProfile,omitempty"`
	// Agent is bcd ("" reads as bcd) or none.
	Agent string `json:"agent,omitempty"`
	// Enrollment is what a machine goes through after enrolling before it is ready:
	// trust ("" reads as trust), inspect or commission.
	Enrollment string `json:"enrollment,omitempty"`
	// TrustProvisioningNetwork binds at once the MAC PXE discovery proposes for a node
	// enrolled by its product UUID alone; without it metal.confirmMac binds it.
	TrustProvisioningNetwork bool `json:"trustProvisioningNetwork,omitempty"`
	// RequireGPUs makes commissioning fail on a machine without a GPU; without it
	// commissioning skips the GPU diagnostics of such a machine.
	RequireGPUs   bool            `json:"requireGpus,omitempty"`
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
	// MIGLayout is the layout a mig-layout unit with from: "pool" takes: "all" or a GPU
	// index to GPU instance profiles, as the unit's layout.
	MIGLayout json.RawMessage `json:"migLayout,omitempty"`
	// Remediation is when the registry remediates the pool's active nodes by itself;
	// nil never.
	Remediation *RemediationPolicy `json:"remediation,omitempty"`
	// MeasuredBoot is the pool's measured-boot policy; nil is off.
	MeasuredBoot *MeasuredBootPolicy `json:"measuredBoot,omitempty"`
}

// RemediationPolicy is a pool's automatic health remediation (registry/metal checks
// the durations).
type RemediationPolicy struct {
	// AgentGoneAfter: an active node whose installed OS's agent has had no session for
	// this long (a duration like 15m) is remediated with remediate-reboot; "" never.
	AgentGoneAfter string `json:"agentGoneAfter,omitempty"`
	// Backoff is the least time between two automatic remediations of a node (1h when
	// "").
	Backoff string `json:"backoff,omitempty"`
}

// Agents a pool's machines run.
const (
	// AgentBCD: the machines boot the ramdisk and run bcd once installed (the default).
	AgentBCD = "bcd"
	// AgentNone: the machines never run bcd; only out-of-band steps reach them.
	AgentNone = "none"
)

// What a pool's machines go through after enrolling (PoolPolicy.Enrollment).
const (
	// EnrollTrust: ready once metal-enroll has run (the default).
	EnrollTrust = "trust"
	// EnrollInspect: inspected, then ready.
	EnrollInspect = "inspect"
	// EnrollCommission: inspected and commissioned, then ready.
	EnrollCommission = "commission"
)

const (
	bucketPools = "pools"
	// bucketPoolsBySite maps site \0 tenant \0 name to nothing: the pools of a site.
	bucketPoolsBySite = "pools_by_site"
)

func poolKey(tenant, name string) []byte { return []byte(tenant + "\x00" + name) }

// checkPolicy refuses an agent other than bcd and none, and image sources that are not
// host patterns.
func checkPolicy(p PoolPolicy) error {
	if a := p.Agent; a != "" && a != AgentBCD && a != AgentNone {
		return proto.Errorf(proto.InvalidInput, "agent %q: use bcd or none", a).WithPath("policy.agent")
	}
	if e := p.Enrollment; e != "" && e != EnrollTrust && e != EnrollInspect && e != EnrollCommission {
		return proto.Errorf(proto.InvalidInput, "enrollment %q: use trust, inspect or commission", e).WithPath("policy.enrollment")
	}
	return proto.CheckImageSources(p.ImageSources, "policy.imageSources")
}

// CreatePool stores a new pool of its tenant at an existing site. A name the tenant
// uses already is CONFLICT; a site that does not exist is NOT_FOUND; a pool past the
// tenant's bound (TenantBounds.Pools) INVALID_STATE, reason quota, at name. Names, the agent
// and the image sources are checked here; the pre-warm refs, the hardware profile and
// the units' settings are the caller's to check.
func (t *Tx) CreatePool(p Pool) (Pool, error) {
	if err := checkName("pool", p.Name, "name"); err != nil {
		return Pool{}, err
	}
	if err := checkPolicy(p.Policy); err != nil {
		return Pool{}, err
	}
	if _, err := t.Tenant(p.Tenant); err != nil {
		return Pool{}, err
	}
	if _, err := t.Site(p.Site); err != nil {
		return Pool{}, proto.AsError(err).WithPath("siteId")
	}
	if t.getRaw(bucketPools, poolKey(p.Tenant, p.Name)) != nil {
		return Pool{}, proto.Errorf(proto.Conflict, "tenant %q has a pool %q already: `pools update %s` changes its policy, or name another pool", p.Tenant, p.Name, p.Name).WithPath("name")
	}
	if err := t.admit(countPools, p.Tenant, "name"); err != nil {
		return Pool{}, err
	}
	p.CreatedAt, p.UpdatedAt = t.now, t.now
	if err := t.putRaw(bucketPoolsBySite, []byte(p.Site+"\x00"+p.Tenant+"\x00"+p.Name), nil); err != nil {
		return Pool{}, err
	}
	return p, t.put(bucketPools, poolKey(p.Tenant, p.Name), p)
}

// SetPoolPolicy replaces a pool's policy; the agent and the image sources are checked
// as CreatePool checks them.
func (t *Tx) SetPoolPolicy(tenant, name string, policy PoolPolicy) (Pool, error) {
	if err := checkPolicy(policy); err != nil {
		return Pool{}, err
	}
	p, err := t.Pool(tenant, name)
	if err != nil {
		return p, err
	}
	p.Policy, p.UpdatedAt = policy, t.now
	return p, t.put(bucketPools, poolKey(tenant, name), p)
}

// Pool returns one pool of tenant, NOT_FOUND when it has none of that name.
func (t *Tx) Pool(tenant, name string) (Pool, error) {
	var p Pool
	ok, err := t.get(bucketPools, poolKey(tenant, name), &p)
	if err == nil && !ok {
		err = notFound("pool", name)
	}
	return p, err
}

// Pools lists tenant's pools, one page at a time.
func (t *Tx) Pools(tenant string, pg Page) ([]Pool, string, error) {
	var out []Pool
	next, err := t.scan(bucketPools, []byte(tenant+"\x00"), pg, func(k, v []byte) (func(), error) {
		var p Pool
		if err := decode(bucketPools, k, v, &p); err != nil {
			return nil, err
		}
		return func() { out = append(out, p) }, nil
	})
	return out, next, err
}

// PoolsAtSite returns every pool of every tenant at site, ordered by tenant and name.
func (t *Tx) PoolsAtSite(site string) ([]Pool, error) {
	prefix := []byte(site + "\x00")
	var out []Pool
	c := t.kv.cursor(bucketPoolsBySite)
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		tenant, name, _ := bytes.Cut(k[len(prefix):], []byte{0})
		p, err := t.Pool(string(tenant), string(name))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
