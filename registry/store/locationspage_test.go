package store

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// TestAPageOfASitesLocationsReadsWhatItAnswers: rack-1's cache holds 150 digests for
// source a, each located for an image of acme's and one of beta's, and every other
// digest for source b too, located for gamma's image of it; gamma's image of b of
// every third digest that rack-1 does not hold for b is located by none, and rack-10
// holds every digest beside it. Over the pages of rack-1 (7 a page, and the default
// page), on both backends, each located image is listed once, none other, and the
// cursor of each page but the last leads to a page that follows. A page of 7 reads at
// most 8 keys for each location it may visit, 9 (the one it resumes, one for each image
// it answers, the one after them): the location, its digest's three index keys and
// three records, and the key past them. Before, every page read the site's whole list,
// 175 locations and their images, 1,700 keys. A cursor whose location the cache
// dropped since resumes at the next location, and a cursor of another form (the image
// id the list paged by before, another site's, one cut short) is INVALID_INPUT at
// cursor.
func TestAPageOfASitesLocationsReadsWhatItAnswers(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withTenants(t, open, "acme", "beta", "gamma")
		const digests = 150
		want := map[string]bool{}
		mustUpdate(t, s, func(tx *Tx) error {
			for _, site := range []string{"rack-1", "rack-10"} {
				if _, err := tx.CreateSite(site); err != nil {
					return err
				}
			}
			return nil
		})
		for from := 0; from < digests; from += 50 {
			mustUpdate(t, s, func(tx *Tx) error {
				for i := from; i < from+50; i++ {
					d := fmt.Sprintf("%064x", i+1)
					locate := func(site, source string) error {
						_, err := tx.PutSiteLocation(SiteLocation{Site: site, Digest: d, Source: source, State: proto.CacheReady})
						return err
					}
					image := func(tenant, source string, located bool) error {
						img := testImage(tenant, fmt.Sprintf("os@%d", i), false)
						img.SHA256, img.Source = d, source
						img, err := tx.CreateImage(img)
						if located {
							want[img.ID] = true
						}
						return err
					}
					heldB := i%2 == 0
					for _, err := range []error{locate("rack-1", "https://a/os"), locate("rack-10", "https://a/os"),
						image("acme", "https://a/os", true), image("beta", "https://a/os", true)} {
						if err != nil {
							return err
						}
					}
					if heldB {
						if err := locate("rack-1", "https://b/os"); err != nil {
							return err
						}
					}
					if heldB || i%3 == 0 {
						if err := image("gamma", "https://b/os", heldB); err != nil {
							return err
						}
					}
				}
				return nil
			})
		}
		for _, limit := range []int{7, 0} {
			page := Page{Limit: limit}
			seen := map[string]int{}
			for pages := 1; ; pages++ {
				var locs []ImageLocation
				var next string
				reads := 0
				if err := s.View(func(tx *Tx) (err error) {
					tx.kv = countingKV{tx.kv, &reads}
					locs, next, err = tx.ImageLocationsPage("rack-1", page)
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if len(locs) > page.limit() || next != "" && len(locs) != page.limit() || pages > 1 && len(locs) == 0 {
					t.Fatalf("a page of %d, page %d: %d locations, cursor %q; want a full page before a cursor, and a page after one", limit, pages, len(locs), next)
				}
				if visited := page.limit() + 2; limit == 7 && reads > 8*visited {
					t.Errorf("page %d of 7 read %d keys; want at most %d, 8 for each of the %d locations it may visit", pages, reads, 8*visited, visited)
				}
				for _, l := range locs {
					if l.Site != "rack-1" {
						t.Errorf("page %d holds a location at %s", pages, l.Site)
					}
					seen[l.ImageID]++
				}
				if page.Cursor = next; next == "" {
					break
				}
			}
			if !maps.Equal(seen, countsOf(want)) {
				t.Errorf("pages of %d list %d images (%d of them once); want the %d located, each once", limit, len(seen), countOnce(seen), len(want))
			}
		}

		var first []ImageLocation
		var cursor string
		s.View(func(tx *Tx) (err error) {
			first, cursor, err = tx.ImageLocationsPage("rack-1", Page{Limit: 3})
			return err
		})
		ended := first[2]
		mustUpdate(t, s, func(tx *Tx) error { return tx.DeleteSiteLocation("rack-1", ended.Digest, ended.Source) })
		var after []ImageLocation
		if err := s.View(func(tx *Tx) (err error) {
			after, _, err = tx.ImageLocationsPage("rack-1", Page{Limit: 3, Cursor: cursor})
			return err
		}); err != nil {
			t.Fatalf("a cursor whose location was dropped: %v", err)
		}
		if len(after) != 3 || slices.ContainsFunc(after, func(l ImageLocation) bool { return l.Digest == ended.Digest && l.Source == ended.Source }) ||
			after[0].Digest <= ended.Digest {
			t.Errorf("after the dropped location %s %s: %+v; want the next location's images", ended.Digest, ended.Source, after)
		}

		var rack10 string
		s.View(func(tx *Tx) (err error) {
			_, rack10, err = tx.ImageLocationsPage("rack-10", Page{Limit: 1})
			return err
		})
		for name, cursor := range map[string]string{
			"the image id the list paged by": EncodeCursor([]byte(first[0].ImageID)),
			"rack-10's":                      rack10,
			"a location's key alone":         EncodeCursor(siteLocationKey("rack-1", ended.Digest, ended.Source)),
			"the site alone":                 EncodeCursor([]byte("rack-1\x00")),
			"not base64":                     "!",
		} {
			err := s.View(func(tx *Tx) error { _, _, err := tx.ImageLocationsPage("rack-1", Page{Cursor: cursor}); return err })
			if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "cursor" {
				t.Errorf("a cursor of %s: %v; want INVALID_INPUT at cursor", name, err)
			}
		}
	})
}

// countsOf is each of set's keys once.
func countsOf(set map[string]bool) map[string]int {
	out := map[string]int{}
	for k := range set {
		out[k] = 1
	}
	return out
}

// countOnce is how many of counts' keys are counted once.
func countOnce(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		if c == 1 {
			n++
		}
	}
	return n
}
