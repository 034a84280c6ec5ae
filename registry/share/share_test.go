package share

import (
	"slices"
	"testing"
)

// TestTrim: over a bound, the tenant measuring the most by it loses its last entries
// (of two alike, the later tenant id), so a tenant within its share keeps all; a Once
// bound counts a key held by several entries once, and leaves it as its last goes.
func TestTrim(t *testing.T) {
	one := func(string) int64 { return 1 }
	lists := map[string][]string{"acme": {"a1", "a2"}, "beta": {"b1", "b2", "b3", "b4", "b5"}, "zeta": {"z1", "z2"}}
	dropped := Trim(lists, []Bound[string]{{Max: 6, Measure: one}})
	want := map[string][]string{"acme": {"a1", "a2"}, "beta": {"b1", "b2"}, "zeta": {"z1", "z2"}}
	for tenant := range want {
		if !slices.Equal(lists[tenant], want[tenant]) {
			t.Errorf("kept %v, want %v", lists, want)
		}
	}
	if len(dropped) != 3 || dropped[0] != (Dropped[string]{Tenant: "beta", Entry: "b5"}) || dropped[2].Entry != "b3" {
		t.Errorf("dropped %v, want beta's last three, last first", dropped)
	}

	// Alike, the later tenant loses first.
	lists = map[string][]string{"acme": {"a1", "a2"}, "beta": {"b1", "b2"}}
	if d := Trim(lists, []Bound[string]{{Max: 3, Measure: one}}); len(d) != 1 || d[0].Tenant != "beta" {
		t.Errorf("dropped %v, want beta's last", d)
	}

	// A Once bound: "x" listed by both counts once; the first bound over is the one told.
	key := func(e string) string { return e[:1] }
	lists = map[string][]string{"acme": {"x1", "y1"}, "beta": {"x2", "z1"}}
	d := Trim(lists, []Bound[string]{{Max: 10, Measure: one}, {Max: 2, Measure: one, Once: key}})
	if len(d) != 1 || d[0] != (Dropped[string]{Tenant: "beta", Entry: "z1", Bound: 1}) || !slices.Equal(lists["beta"], []string{"x2"}) {
		t.Errorf("dropped %v, kept %v: want beta's z1 by the Once bound, x held by both counted once", d, lists)
	}
}

// TestTrimOnceKeyMeasuredUnalike: tenants measure one Once key differently (each its own
// image of a digest, its own size declared). The key counts at the most an entry having
// it measures, as long as one does: a tenant declaring another's key larger is trimmed
// for it, and one declaring it smaller does not shrink it. Before, the key counted at the
// measure of the first tenant's entry and left the total at the last one's: acme's
// overstated key stayed counted after it went, beta lost a list within its share, and
// Trim panicked with every list empty; acme's understated one let the lists stay over
// the bound.
func TestTrimOnceKeyMeasuredUnalike(t *testing.T) {
	type entry struct {
		key  string
		size int64
	}
	bounds := []Bound[entry]{{Max: 100, Measure: func(e entry) int64 { return e.size }, Once: func(e entry) string { return e.key }}}

	lists := map[string][]entry{"acme": {{"d", 1000}}, "beta": {{"d", 10}, {"e", 20}}}
	d := Trim(lists, bounds)
	if len(d) != 1 || d[0].Tenant != "acme" || !slices.Equal(lists["beta"], []entry{{"d", 10}, {"e", 20}}) {
		t.Errorf("overstated: dropped %v, kept %v: want acme's d alone dropped", d, lists)
	}

	// acme understates d, which beta measures at 40: d counts 40, so the 50 of acme's own
	// key do not fit in 80 beside it, and acme, measuring the most, loses it.
	bounds[0].Max = 80
	lists = map[string][]entry{"acme": {{"d", 1}, {"f", 50}}, "beta": {{"d", 40}}}
	d = Trim(lists, bounds)
	if len(d) != 1 || d[0].Tenant != "acme" || d[0].Entry.key != "f" || !slices.Equal(lists["beta"], []entry{{"d", 40}}) {
		t.Errorf("understated: dropped %v, kept %v: want acme's f dropped", d, lists)
	}
}
