// Package share keeps what the tenants list at a site within the site's bounds, fairly:
// while a bound is over, the tenant whose entries measure the most by it loses its last
// entry. A tenant listing no more than its share (the bound over the tenants listing)
// keeps its whole list, however much another lists, and a tenant alone keeps all that
// fits. The site's cache plan (registry/image) and its known MACs (registry/site) keep to
// it.
package share

import (
	"maps"
	"slices"
)

// Bound is one bound Trim keeps the lists within: the entries' measure summed is at most
// Max.
type Bound[E any] struct {
	Max     int64
	Measure func(E) int64
	// Once, when set, keys the entries that count once toward the total, however many
	// entries (of one tenant or several) have the key: what the site holds one copy of.
	// Each tenant's own measure counts every entry.
	Once func(E) string
}

// Dropped is an entry Trim left out: whose it was, and the index of the bound that was
// over.
type Dropped[E any] struct {
	Tenant string
	Entry  E
	Bound  int
}

// Trim brings lists (tenant -> its entries, the ones to keep longest first) within
// bounds: while a bound is over (the first that is), the tenant whose entries measure
// the most by it (of two alike, the later tenant id) loses its last entry. It shortens
// the lists in place and returns what it dropped, in the order it dropped them.
func Trim[E any](lists map[string][]E, bounds []Bound[E]) []Dropped[E] {
	tenants := slices.Sorted(maps.Keys(lists))
	sums := map[string][]int64{} // tenant -> its entries' measure by each bound
	totals := make([]int64, len(bounds))
	held := make([]map[string]int, len(bounds)) // a Once bound's key -> entries having it
	count := func(tenant string, e E, sign int) {
		for i, b := range bounds {
			m := int64(sign) * b.Measure(e)
			sums[tenant][i] += m
			if b.Once == nil {
				totals[i] += m
				continue
			}
			// An entry counts toward a Once bound's total as the first having its key
			// comes, and leaves it as the last goes.
			if held[i] == nil {
				held[i] = map[string]int{}
			}
			k := b.Once(e)
			held[i][k] += sign
			if held[i][k] == 1 && sign > 0 || held[i][k] == 0 {
				totals[i] += m
			}
		}
	}
	for _, tenant := range tenants {
		sums[tenant] = make([]int64, len(bounds))
		for _, e := range lists[tenant] {
			count(tenant, e, 1)
		}
	}
	var out []Dropped[E]
	for {
		over := -1
		for i, b := range bounds {
			if totals[i] > b.Max {
				over = i
				break
			}
		}
		if over < 0 {
			return out
		}
		var most string
		for _, tenant := range tenants {
			if most == "" || sums[tenant][over] >= sums[most][over] {
				most = tenant
			}
		}
		l := lists[most]
		e := l[len(l)-1]
		lists[most] = l[:len(l)-1]
		count(most, e, -1)
		out = append(out, Dropped[E]{Tenant: most, Entry: e, Bound: over})
	}
}
