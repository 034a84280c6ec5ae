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
	// A key counts at the most any entry having it measures, as tenants may measure one
	// key differently (each its own image of a digest, its own size declared). Each
	// tenant's own measure counts every entry.
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
	held := make([]map[string][]int64, len(bounds)) // a Once bound's key -> the measures of the entries having it
	count := func(tenant string, e E, sign int) {
		for i, b := range bounds {
			m := b.Measure(e)
			sums[tenant][i] += int64(sign) * m
			if b.Once == nil {
				totals[i] += int64(sign) * m
				continue
			}
			// A key counts toward a Once bound's total at the most an entry having it
			// measures: what it added as the entries came is what it takes as they go,
			// and a tenant measuring another's key more than the other does is the one
			// it counts against.
			if held[i] == nil {
				held[i] = map[string][]int64{}
			}
			k := b.Once(e)
			before := largest(held[i][k])
			if sign > 0 {
				held[i][k] = append(held[i][k], m)
			} else {
				at := slices.Index(held[i][k], m)
				held[i][k] = slices.Delete(held[i][k], at, at+1)
			}
			totals[i] += largest(held[i][k]) - before
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

// largest is the largest of measures, 0 for none.
func largest(measures []int64) int64 {
	var m int64
	for _, x := range measures {
		m = max(m, x)
	}
	return m
}
