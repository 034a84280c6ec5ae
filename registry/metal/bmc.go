package metal

import (
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
)

// BMCUpdate is a change of an enrolled node's BMC: what it sets replaces the BMC's.
type BMCUpdate struct {
	Tenant string
	Node   string
	// Driver and Address replace the BMC's when not empty.
	Driver, Address string
	// CredentialRef replaces the BMC's credential reference when not nil; "" removes it.
	CredentialRef *string
	// Platform says that a root-tenant credential makes the change (Enrollment.Platform).
	Platform bool
}

// UpdateBMC binds a node's BMC again, under the rules of enrollment (checkBMC, the
// site's BMC networks), and resolves its driver bindings again. The binding becomes the
// changer's: a change a tenant makes to a BMC the platform bound drops the platform's
// credential (secret://platform/NAME), which only a root-tenant credential binds again;
// the tenant names its own, or the node has none. A root-tenant credential binding the
// BMC of a node its tenant enrolled drops the trust options of the tenant's overrides. A node whose workflow runs, or that is
// retired, is INVALID_STATE; another tenant's, NOT_FOUND.
func (s *Service) UpdateBMC(tx *store.Tx, u BMCUpdate) (store.Node, error) {
	n, err := tx.Node(u.Node)
	if err != nil || n.Tenant != u.Tenant {
		return store.Node{}, proto.Errorf(proto.NotFound, "node %q not found: %s", u.Node, store.NodesListed).WithPath(nodeField)
	}
	running, err := workflowRunning(tx, n)
	switch {
	case err != nil:
		return n, err
	case running:
		return n, proto.Errorf(proto.InvalidState, "node %s is %s (workflow %s): change its BMC once the workflow has ended", n.ID, n.State, n.Workflow).WithPath(nodeField).WithReason(n.State)
	case n.State == store.NodeRetired:
		return n, proto.Errorf(proto.InvalidState, "node %s is retired: it can only be read", n.ID).WithPath(nodeField).WithReason(n.State)
	}
	b := n.BMC
	if u.Driver != "" {
		b.Driver = u.Driver
	}
	if u.Address != "" {
		b.Address = u.Address
	}
	if u.CredentialRef != nil {
		b.CredentialRef = *u.CredentialRef
	} else if _, ok := secret.PlatformRef(b.CredentialRef); ok && !u.Platform {
		b.CredentialRef = ""
	}
	pool, err := tx.Pool(n.Tenant, n.Pool)
	if err != nil {
		return n, err
	}
	if b, err = bindBMC(tx, pool, b, u.Platform); err != nil {
		return n, err
	}
	hw, err := s.hardwareProfile(pool, n.HardwareProfile)
	if err != nil {
		return n, err
	}
	// The overrides of a node its tenant enrolled are the tenant's: the platform's
	// credential, bound now, goes to no BMC they trust (proto.BMCTrustOptions).
	overrides, kept := map[string]Binding{}, map[string]store.DriverBinding{}
	for c, o := range n.DriverOverrides {
		if u.Platform && !n.PlatformOverrides && slices.Contains(bmcConcerns, c) {
			o.Config = withoutTrust(o.Config)
		}
		overrides[c], kept[c] = Binding(o), o
	}
	return updateNode(tx, n.ID, func(m *store.Node) error {
		m.BMC, m.PlatformBMC, m.DriverOverrides, m.Drivers = b, u.Platform, kept, resolveDriverBindings(b, hw, overrides)
		return nil
	})
}

// bindBMC checks a BMC to be bound to a machine of pool (checkBMC) and that its address is
// one the pool's site admits (store.Site.CheckBMCAddress).
func bindBMC(tx *store.Tx, pool store.Pool, b store.BMC, platform bool) (store.BMC, error) {
	b, err := checkBMC(b, platform)
	if err != nil {
		return b, err
	}
	site, err := tx.Site(pool.Site)
	if err != nil {
		return b, err
	}
	return b, site.CheckBMCAddress(b.Address, platform)
}

// hardwareProfile is the hardware profile of a machine of pool whose own is own (""
// for none): own, else the pool's. An unknown one is INVALID_INPUT at hardwareProfile,
// or at pool for the pool's.
func (s *Service) hardwareProfile(pool store.Pool, own string) (*HardwareProfile, error) {
	name, path := own, "hardwareProfile"
	if name == "" {
		name, path = pool.Policy.HardwareProfile, "pool"
	}
	hw, err := s.cfg.HardwareProfiles.lookup(name)
	if err != nil {
		return nil, proto.AsError(err).WithPath(path)
	}
	return hw, nil
}
