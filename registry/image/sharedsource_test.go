package image

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// registerCopies has tenant register up to n images of acme's fixture image a's digest
// and source (a public image's source is every tenant's to read), refs copy-0@1 on, a
// hundred a transaction, until the catalog refuses one; it returns how many it holds
// and the refusal.
func registerCopies(t *testing.T, f *siteFixture, tenant string, n int) (int, error) {
	t.Helper()
	var made int
	var refused error
	for made < n && refused == nil {
		storetest.Update(t, f.st, func(tx *store.Tx) error {
			for i := 0; i < 100 && made < n; i++ {
				req := osRequest(fmt.Sprintf("copy-%d@1", made))
				req.SHA256, req.Source = digest("a"), sourceOf("a")
				if _, refused = Register(tx, Allowlist{}, tenant, req); refused != nil {
					return nil
				}
				made++
			}
			return nil
		})
	}
	return made, refused
}

// TestAnotherTenantsCopiesOfASourceDoNotStopASitesReports: tenant beta registers
// thousands of images of acme's digest and source. The catalog refuses it past its
// bound, and the site's report that its cache holds the digest is recorded on both
// backends, acme's image located ready there. Before, beta registered 5,000: on etcd
// the report wrote every one's location in its transaction, more than etcd takes, and
// every report of the site failed, so its locations stopped following its cache for
// every tenant.
func TestAnotherTenantsCopiesOfASourceDoNotStopASitesReports(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			f := newSiteFixtureOn(t, b.Open)
			made, refused := registerCopies(t, f, "beta", 5000)
			if _, err := f.run(t, step{agent: "a1", entries: []proto.ImageCacheEntry{entry("a", proto.CacheReady)}}); err != nil {
				t.Fatalf("beta holds %d images of acme's digest and source; the site's report: %v", made, err)
			}
			if got := f.locations(t)["a"]; got != string(proto.CacheReady) {
				t.Errorf("acme's image a at the site: %q; want ready", got)
			}
			// beta holds a2, of the digest, from the fixture.
			if made != MaxImagesPerDigest-1 || refused == nil {
				t.Fatalf("beta registered %d images of acme's digest beside a2 (%v); want %d, then a refusal", made, refused, MaxImagesPerDigest-1)
			}
			checkErr(t, refused, proto.InvalidInput, "sha256", "")
			// Another source of the digest is the same artifact: it counts alike.
			other := osRequest("copy-other@1")
			other.SHA256 = digest("a")
			_, err := register(f.st, "beta", other)
			checkErr(t, err, proto.InvalidInput, "sha256", "")
		})
	}
}

// addCopies adds, for each of tenants new tenants from first on (t000, t001, ...),
// MaxImagesPerDigest images of acme's fixture image a's digest and source, as a fleet's
// tenants register a public image under refs of their own, each within the bound. It
// writes them as images.register does (store.CreateImage), many a transaction: each
// registration of the digest reads every image of it, and thousands through Register
// would take the test minutes.
func addCopies(t *testing.T, f *siteFixture, first, tenants int) {
	t.Helper()
	for i := first; i < first+tenants; i += 8 {
		storetest.Update(t, f.st, func(tx *store.Tx) error {
			for j := i; j < min(i+8, first+tenants); j++ {
				tn := fmt.Sprintf("t%03d", j)
				if _, err := tx.CreateTenant(tn); err != nil {
					return err
				}
				for k := range MaxImagesPerDigest {
					img, _, err := validate(osRequest(fmt.Sprintf("copy-%d@1", k)))
					if err != nil {
						return err
					}
					img.Tenant, img.SHA256, img.Source = tn, digest("a"), sourceOf("a")
					if _, err := tx.CreateImage(img); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
}

// TestASitesReportWritesOnlyTheLocationsItChanges: tenants register images of acme's
// digest and source over time, each within the bound, 2,048 then 2,048 more while the
// site's cache holds the digest, until more than one etcd transaction takes. A report
// that changes only image b writes b's location and those of the images new since,
// on both backends, and leaves a's location as it was. Before, every report rewrote the
// location of every image of every digest the site holds: on etcd the report after the
// second 2,048 wrote 4,000-odd keys and failed, and so did every report after it.
func TestASitesReportWritesOnlyTheLocationsItChanges(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			f := newSiteFixtureOn(t, b.Open)
			addCopies(t, f, 0, 32)
			report := []proto.ImageCacheEntry{entry("a", proto.CacheReady)}
			if _, err := f.run(t, step{agent: "a1", entries: report}); err != nil {
				t.Fatalf("the first report, 2,049 images of a: %v", err)
			}
			before := f.location(t, f.ids["a"])
			f.now = f.now.Add(time.Hour)
			addCopies(t, f, 32, 32)
			report = append(report, entry("b", proto.CacheReady))
			if _, err := f.run(t, step{agent: "a1", entries: report}); err != nil {
				t.Fatalf("a report adding b, 4,097 images of a, 2,048 of them new: %v", err)
			}
			if got := f.locations(t)["b"]; got != string(proto.CacheReady) {
				t.Errorf("b at the site: %q; want ready", got)
			}
			if after := f.location(t, f.ids["a"]); !after.UpdatedAt.Equal(before.UpdatedAt) {
				t.Errorf("a's location, unchanged, was written again: updated %v, before %v", after.UpdatedAt, before.UpdatedAt)
			}
			var n int
			f.st.View(func(tx *store.Tx) error {
				locs, err := storetest.ImageLocations(tx, "rack-1")
				n = len(locs)
				return err
			})
			if want := 2 + 64*MaxImagesPerDigest; n != want {
				t.Errorf("%d locations at the site; want %d: a, b and every tenant's copy", n, want)
			}
		})
	}
}

// location is the site's location of image id.
func (f *siteFixture) location(t *testing.T, id string) store.ImageLocation {
	t.Helper()
	var loc store.ImageLocation
	if err := f.st.View(func(tx *store.Tx) (err error) { loc, err = tx.ImageLocation("rack-1", id); return err }); err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestAReportOfADigestOfThousandsOfImagesIsRecorded: 65 tenants register 64 images each
// of acme's digest and source, 4,161 images of it with acme's a, more than the 4,091 a
// report could locate in one etcd transaction. The site's report of the digest, then
// its report that the digest is evicting, are recorded on both backends, and every one
// of those images is located as the report says; beta's a2, of the digest from a source
// of its own the cache never pulled, is located by neither. Before, on etcd, the first
// report wrote 4,161 locations and was refused ("too large for one etcd transaction"),
// and so was every report of the site after it.
func TestAReportOfADigestOfThousandsOfImagesIsRecorded(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			f := newSiteFixtureOn(t, b.Open)
			addCopies(t, f, 0, 65)
			want := 1 + 65*MaxImagesPerDigest
			for _, state := range []proto.ImageCacheState{proto.CacheReady, proto.CacheEvicting} {
				if _, err := f.run(t, step{agent: "a1", entries: []proto.ImageCacheEntry{entry("a", state)}}); err != nil {
					t.Fatalf("a report of a %s, %d images of its digest and source: %v", state, want, err)
				}
				var locs []store.ImageLocation
				f.st.View(func(tx *store.Tx) (err error) { locs, err = storetest.ImageLocations(tx, "rack-1"); return err })
				if len(locs) != want || slices.ContainsFunc(locs, func(l store.ImageLocation) bool { return l.State != state || l.Digest != digest("a") }) {
					t.Errorf("after a report of a %s: %d locations (the first %+v); want %d, each of a's digest %s", state, len(locs), locs[:min(1, len(locs))], want, state)
				}
				if got := f.location(t, f.ids["a"]); got.State != state {
					t.Errorf("acme's a: %s; want %s", got.State, state)
				}
				err := f.st.View(func(tx *store.Tx) error { _, err := tx.ImageLocation("rack-1", f.ids["a2"]); return err })
				if proto.CodeOf(err) != proto.NotFound {
					t.Errorf("beta's a2, of a's digest from a source the site never pulled: %v; want NOT_FOUND", err)
				}
			}
		})
	}
}
