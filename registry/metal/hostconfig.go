package metal

import (
	"slices"

	"github.com/better-compute/better-compute/proto/hostunit"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// hostSection is a node's desired host section after a deploy of p: the profile's
// hostConfig, with each unit the pool's policy sets replacing the profile's, in the
// order bcd applies the units.
func hostSection(p *profile.Profile, policy store.PoolPolicy) []store.HostUnit {
	var out []store.HostUnit
	for _, u := range p.HostConfig() {
		out = append(out, store.HostUnit{Unit: u.Name, Settings: u.Settings})
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
