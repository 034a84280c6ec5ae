package metal

import (
	"encoding/json"
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// hostSection is a node's desired host section after a deploy of p: the profile's
// hostConfig, with each unit the pool's policy sets replacing the profile's, in the
// order bcd applies the units. A mig-layout unit with from: "pool" takes the pool's
// policy.migLayout as its layout, so bcd never sees a from; without one the unit is left
// out (metal.deploy refuses such a deploy when it starts).
func hostSection(p *profile.Profile, policy store.PoolPolicy) []store.HostUnit {
	var out []store.HostUnit
	for _, u := range p.HostConfig() {
		settings := u.Settings
		if u.Name == hostunit.UnitMIGLayout && migFromPool(settings) {
			var ok bool
			if settings, ok = poolMIGLayout(settings, policy); !ok {
				continue
			}
		}
		out = append(out, store.HostUnit{Unit: u.Name, Settings: settings})
	}
	for _, unit := range PoolUnits(policy) {
		if i := slices.IndexFunc(out, func(u store.HostUnit) bool { return u.Unit == unit.Unit }); i >= 0 {
			out[i] = unit
		} else {
			out = append(out, unit)
		}
	}
	order := hostunit.Order()
	slices.SortStableFunc(out, func(a, b store.HostUnit) int {
		return slices.Index(order, a.Unit) - slices.Index(order, b.Unit)
	})
	return out
}

// migFromPool reports whether mig-layout settings take the pool's layout.
func migFromPool(settings json.RawMessage) bool {
	var m struct{ From string }
	return json.Unmarshal(settings, &m) == nil && m.From == "pool"
}

// poolMIGLayout is mig-layout settings with from: "pool" made a layout of the pool's
// policy.migLayout, their other fields (when) kept; false when the pool sets none.
func poolMIGLayout(settings json.RawMessage, policy store.PoolPolicy) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if policy.MIGLayout == nil || json.Unmarshal(settings, &m) != nil {
		return nil, false
	}
	delete(m, "from")
	m["layout"] = policy.MIGLayout
	return mustJSON(m), true
}

// checkMIGFromPool refuses a deploy of p on a pool without policy.migLayout when p's
// mig-layout unit takes the pool's: it would reach the node unresolved.
func checkMIGFromPool(p *profile.Profile, pool store.Pool) error {
	for _, u := range p.HostConfig() {
		if u.Name == hostunit.UnitMIGLayout && migFromPool(u.Settings) && pool.Policy.MIGLayout == nil {
			return proto.Errorf(proto.InvalidInput, "profile %s@%d's mig-layout takes the pool's layout (from: pool), and pool %s sets no policy.migLayout: set it (`pools update %s --policy FILE`) or give the unit a layout",
				p.ID(), p.Version(), pool.Name, pool.Name).WithPath("profile")
		}
	}
	return nil
}
