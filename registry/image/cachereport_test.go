package image

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/sectionpack"
)

// imagesBudget is the byte budget a site agent cuts its `images` section to (agent/site's
// imagesBudget) before it cuts it further to what the registry stores.
const imagesBudget = 1536 << 10

// busyCache are the entries of a busy site's cache after fixture image b, ready: images of
// random digests, each verified for proto.MaxImageCacheSources sources of a tenant's
// catalog, as many as an `images` section at its budget holds. They compress, as such
// reports do.
func busyCache(t *testing.T) []proto.ImageCacheEntry {
	t.Helper()
	r := rand.New(rand.NewPCG(5, 5))
	used := time.Date(2026, 8, 31, 12, 0, 0, 0, time.UTC)
	list := []proto.ImageCacheEntry{entry("b", proto.CacheReady)}
	size := len(sectionOf(t, list))
	for i := 0; ; i++ {
		e := proto.ImageCacheEntry{Digest: fmt.Sprintf("%016x%016x%016x%016x", r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()),
			State: proto.CacheReady, SizeBytes: r.Int64N(1 << 36), LastUsed: used.Add(-time.Duration(i) * time.Minute)}
		for j := range proto.MaxImageCacheSources {
			e.Sources = append(e.Sources, fmt.Sprintf("https://images.example.com/tenant-%02d/ubuntu-24.04-cuda-%d.%d.raw.zst", j, i, r.IntN(100)))
		}
		if size += len(sectionOf(t, []proto.ImageCacheEntry{e})) - 1; size > imagesBudget { // less its brackets, and its comma
			return list
		}
		list = append(list, e)
	}
}

// randomSourced are n ready images, never used, each with proto.MaxImageCacheSources
// sources of about 2 KB of random characters (agent/site's randomSourced): entries that do
// not compress, as a tenant that registers such sources and pre-warms them can make the
// site's cache keep.
func randomSourced(n int) []proto.ImageCacheEntry {
	const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	r := rand.New(rand.NewPCG(3, 3))
	images := make([]proto.ImageCacheEntry, n)
	for i := range images {
		images[i] = proto.ImageCacheEntry{Digest: fmt.Sprintf("%064x", i), State: proto.CacheReady, SizeBytes: 1}
		for j := range proto.MaxImageCacheSources {
			pad := make([]byte, 2000)
			for k := range pad {
				pad[k] = letters[r.IntN(len(letters))]
			}
			images[i].Sources = append(images[i].Sources, fmt.Sprintf("https://images.example/%s/%03d-%02d.raw", pad, i, j))
		}
	}
	return images
}

// sectionOf is list as a site agent sends it in its `images` section.
func sectionOf(t *testing.T, list []proto.ImageCacheEntry) []byte {
	t.Helper()
	b, err := proto.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fitting is the longest leading run of list whose section's stored form fits what the
// registry stores of a section (sectionpack.Fits), as a site agent cuts its section.
func fitting(t *testing.T, list []proto.ImageCacheEntry) []proto.ImageCacheEntry {
	t.Helper()
	lo, hi := 0, len(list)+1 // list[:lo] fits, list[:hi] does not
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; sectionpack.Fits(sectionOf(t, list[:mid])) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return list[:lo]
}

// TestAWholeCacheReportAtItsBudgetIsRecorded: a site's cache report of an `images`
// section at its budget (1.5 MiB), whose stored form the registry took, is recorded on
// both backends, and the site's location of image b follows it. Before, on etcd the
// report's record, its entries as JSON, took more than one transaction: etcd refused
// it, and the site's locations stopped following its cache.
func TestAWholeCacheReportAtItsBudgetIsRecorded(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			f := newSiteFixtureOn(t, b.Open)
			list := busyCache(t)
			if section := sectionOf(t, list); len(section) > imagesBudget || !sectionpack.Fits(section) {
				t.Fatalf("the section takes %d bytes, %d stored: a site would cut it", len(section), sectionpack.Pack(section).Size())
			}
			if _, err := f.run(t, step{agent: "a1", entries: list}); err != nil {
				t.Fatalf("a report of %d images in %d bytes: %v", len(list), len(sectionOf(t, list)), err)
			}
			if got := f.locations(t)["b"]; got != string(proto.CacheReady) {
				t.Errorf("b's location: %q; want ready", got)
			}
			checkStored(t, f, "a1", list)
		})
	}
}

// TestCutCacheReportsOfRandomSourcesAreRecorded: a site's cache holds 300 images of 16
// sources of 2 KB of random characters each, and image b. Its `images` sections are cut
// to what the registry stores; each cut report is recorded on both backends, the
// entries it names kept, the location of b following the second (evicting), and what the
// registry adds of the first report within what the store takes. Before, the second
// report's record (its entries and the first report's it does not name, up to a frame
// of JSON) took 2 MB: etcd refused it and b stayed ready at the site.
func TestCutCacheReportsOfRandomSourcesAreRecorded(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			f := newSiteFixtureOn(t, b.Open)
			images := randomSourced(300)
			first := fitting(t, append([]proto.ImageCacheEntry{entry("b", proto.CacheReady)}, images...))
			if _, err := f.run(t, step{agent: "a1", entries: first, cut: true}); err != nil {
				t.Fatalf("the first cut report, %d images in %d bytes: %v", len(first), len(sectionOf(t, first)), err)
			}
			checkStored(t, f, "a1", first)
			second := fitting(t, append([]proto.ImageCacheEntry{entry("b", proto.CacheEvicting)}, images[len(first)-1:]...))
			if _, err := f.run(t, step{agent: "a1", entries: second, cut: true}); err != nil {
				t.Fatalf("the second cut report, %d images in %d bytes: %v", len(second), len(sectionOf(t, second)), err)
			}
			if got := f.locations(t)["b"]; got != string(proto.CacheEvicting) {
				t.Errorf("b's location: %q; want evicting, as the second report says", got)
			}
			checkStored(t, f, "a1", second)
			// A cut report of fewer images keeps as many of the second's as the store takes.
			third := append([]proto.ImageCacheEntry{entry("b", proto.CacheReady)}, second[1:9]...)
			if _, err := f.run(t, step{agent: "a1", entries: third, cut: true}); err != nil {
				t.Fatalf("the third cut report: %v", err)
			}
			if stored := checkStored(t, f, "a1", third); len(stored) <= len(third) {
				t.Errorf("the third report is stored with %d images: want those of the second it leaves out kept beside its %d while they fit", len(stored), len(third))
			}
		})
	}
}

// checkStored checks that agent's stored report holds every entry of reported, as
// reported, and that its entries' stored form fits what the store takes of a report's
// entries (store.MaxCacheReportData) unless reported's alone does not; it returns them.
func checkStored(t *testing.T, f *siteFixture, agent string, reported []proto.ImageCacheEntry) []proto.ImageCacheEntry {
	t.Helper()
	var stored []proto.ImageCacheEntry
	err := f.st.View(func(tx *store.Tx) error {
		reports, err := tx.SiteCacheReports("rack-1")
		for _, r := range reports {
			if r.AgentID == agent {
				stored = r.Images
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	byDigest := map[string]string{}
	for _, e := range stored {
		byDigest[e.Digest] = string(sectionOf(t, []proto.ImageCacheEntry{e}))
	}
	for _, e := range reported {
		if byDigest[e.Digest] != string(sectionOf(t, []proto.ImageCacheEntry{e})) {
			t.Fatalf("the stored report of %d images lacks %s as reported", len(stored), e.Digest)
		}
	}
	if size := sectionpack.Pack(sectionOf(t, stored)).Size(); len(stored) > len(reported) && size > store.MaxCacheReportData {
		t.Errorf("the stored report keeps %d images beside the %d reported, %d bytes stored: more than the %d a section's stored form takes",
			len(stored)-len(reported), len(reported), size, store.MaxCacheReportData)
	}
	return stored
}
