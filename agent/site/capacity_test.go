package site

import (
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
)

// A filesystem figure is reported at a step of about 1/64 of it (a power of two, at
// least 1 MiB), rounded down: never more than the cache can hold.
func TestCapacityStep(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{0, 1 << 20}, {48 << 20, 1 << 20}, {128 << 20, 2 << 20}, {1 << 30, 16 << 20},
		{2<<40 - 1, 16 << 30}, {2 << 40, 32 << 30},
	} {
		if got := capacityStep(c.n); got != c.want {
			t.Errorf("capacityStep(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// The filesystem figure a site reports: the first one rounded down to its step; one
// that rises by less than two steps keeps the figure; one that falls below it is
// reported at once, rounded down; one two steps above is reported. A figure that wanders
// across a step's edge, as a log written and rotated beside the cache makes it, changes
// the report once, not at every crossing.
func TestSteadyFilesystem(t *testing.T) {
	const mib, gib = 1 << 20, 1 << 30
	for _, c := range []struct {
		name            string
		prev, now, want int64
	}{
		{"first", 0, 47*mib + 123, 47 * mib},
		{"first, less than a step", 0, mib - 1, 0},
		{"a small rise", 47 * mib, 48*mib + 5, 47 * mib},
		{"unchanged", 47 * mib, 47 * mib, 47 * mib},
		{"a fall by a byte", 47 * mib, 47*mib - 1, 46 * mib},
		{"a rise by two steps", 47 * mib, 49 * mib, 49 * mib},
		{"a large disk's rise within two steps (of 8 GiB)", 1000 * gib, 1016*gib - 1, 1000 * gib},
		{"a large disk's rise past two steps", 1000 * gib, 1017*gib + 5, 1016 * gib},
		{"the filesystem filled", 1000 * gib, 3 * gib, 3 * gib},
	} {
		if got := steadyFilesystem(c.prev, c.now); got != c.want {
			t.Errorf("%s: steadyFilesystem(%d, %d) = %d, want %d", c.name, c.prev, c.now, got, c.want)
		}
	}
	var reported, changes int64
	for i := range 100 {
		now := int64(40*mib) + int64(i%2)*(mib/2) - mib/4 // across the edge of 40 MiB, by a quarter MiB each way
		if next := steadyFilesystem(reported, now); next != reported {
			reported = next
			changes++
		}
		if reported > now {
			t.Fatalf("reported %d beyond the %d the cache can hold", reported, now)
		}
	}
	if changes > 2 {
		t.Errorf("a figure wandering across a step's edge changed the report %d times, want at most 2", changes)
	}
}

// The site's `site` section reports what its cache can hold and the capacity as
// configured: a capacity within the filesystem as it is, none or one past the
// filesystem what the filesystem allows (more than 0, within its size); and a figure
// read lower than the one reported before (the filesystem filled) is reported at once.
func TestSiteReportsWhatItsCacheCanHold(t *testing.T) {
	sp, err := fsutil.SpaceOf(t.TempDir()) // where openSite puts the cache
	if err != nil {
		t.Fatal(err)
	}
	for name, configured := range map[string]int64{"none": 0, "within the filesystem": 1 << 20, "past the filesystem": 1 << 60} {
		t.Run(name, func(t *testing.T) {
			a, _ := openSite(t, Config{Cache: CacheConfig{CapacityBytes: configured}}, boot.Proxy)
			check := func(when string) {
				t.Helper()
				si := siteSection(t, a)
				ok := si.CacheCapacityBytes > 0 && si.CacheCapacityBytes <= sp.Total
				if configured == 1<<20 {
					ok = si.CacheCapacityBytes == configured
				}
				if !ok || si.CacheConfiguredCapacityBytes != configured {
					t.Errorf("%s, with a capacity of %d on a filesystem of %d bytes the site reports %d (configured %d), want what the cache can hold, and %d configured",
						when, configured, sp.Total, si.CacheCapacityBytes, si.CacheConfiguredCapacityBytes, configured)
				}
			}
			check("at start")
			a.filesystemFigure = 1 << 62 // as if the filesystem had room for that when last read
			a.reports.setCache(1<<62, configured)
			a.refreshCapacity(slog.New(slog.DiscardHandler))
			check("read again")
		})
	}
}

// siteSection is the `site` section a recorded, as the next hello or report sends it.
func siteSection(t *testing.T, a *agent) proto.SiteInventory {
	t.Helper()
	a.reports.mu.Lock()
	defer a.reports.mu.Unlock()
	var si proto.SiteInventory
	if err := json.Unmarshal(a.reports.sections[proto.SectionSite], &si); err != nil {
		t.Fatal(err)
	}
	return si
}
