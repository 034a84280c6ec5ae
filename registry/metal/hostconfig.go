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
func hostSection(p *profile.Profile, policy store.MetalPolicy) []store.HostUnit {
	var out []store.HostUnit
	for _, u := range p.HostConfig() {
		out = append(out, store.HostUnit{Unit: u.Name, Settings: u.Settings})
	}
	for _, pu := range poolUnits {
		raw := pu.get(&policy)
		if raw == nil {
			continue
		}
		unit := store.HostUnit{Unit: pu.unit, Settings: raw}
		if i := slices.IndexFunc(out, func(u store.HostUnit) bool { return u.Unit == pu.unit }); i >= 0 {
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
