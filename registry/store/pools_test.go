package store

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestSitesAndPools(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withTenants(t, open, "acme", "beta")
		steps := []struct {
			name string
			do   func(tx *Tx) error
			code proto.Code
			path string
		}{
			{"site", func(tx *Tx) error { _, err := tx.CreateSite("rack-1"); return err }, "", ""},
			{"site again", func(tx *Tx) error { _, err := tx.CreateSite("rack-1"); return err }, proto.Conflict, "name"},
			{"bad site name", func(tx *Tx) error { _, err := tx.CreateSite("Rack_1"); return err }, proto.InvalidInput, "name"},
			{"pool", func(tx *Tx) error {
				_, err := tx.CreatePool(Pool{Tenant: "acme", Name: "gpu", Site: "rack-1"})
				return err
			}, "", ""},
			{"same name, other tenant", func(tx *Tx) error {
				_, err := tx.CreatePool(Pool{Tenant: "beta", Name: "gpu", Site: "rack-1"})
				return err
			}, "", ""},
			{"pool again", func(tx *Tx) error {
				_, err := tx.CreatePool(Pool{Tenant: "acme", Name: "gpu", Site: "rack-1"})
				return err
			}, proto.Conflict, "name"},
			{"missing site", func(tx *Tx) error {
				_, err := tx.CreatePool(Pool{Tenant: "acme", Name: "cpu", Site: "rack-9"})
				return err
			}, proto.NotFound, "siteId"},
			{"missing tenant", func(tx *Tx) error {
				_, err := tx.CreatePool(Pool{Tenant: "nobody", Name: "cpu", Site: "rack-1"})
				return err
			}, proto.NotFound, ""},
			{"policy", func(tx *Tx) error {
				_, err := tx.SetPoolPolicy("acme", "gpu", PoolPolicy{PrewarmImages: []string{"a@1"}})
				return err
			}, "", ""},
			{"policy of a missing pool", func(tx *Tx) error { _, err := tx.SetPoolPolicy("acme", "cpu", PoolPolicy{}); return err }, proto.NotFound, ""},
			{"an unknown agent", func(tx *Tx) error {
				_, err := tx.CreatePool(Pool{Tenant: "acme", Name: "cpu", Site: "rack-1", Policy: PoolPolicy{Agent: "ipmi"}})
				return err
			}, proto.InvalidInput, "policy.agent"},
			{"an unknown agent set later", func(tx *Tx) error {
				_, err := tx.SetPoolPolicy("acme", "gpu", PoolPolicy{PrewarmImages: []string{"b@1"}, Agent: "ipmi"})
				return err
			}, proto.InvalidInput, "policy.agent"},
			{"agent none", func(tx *Tx) error {
				_, err := tx.CreatePool(Pool{Tenant: "beta", Name: "bare", Site: "rack-1", Policy: PoolPolicy{Agent: AgentNone}})
				return err
			}, "", ""},
			{"bad pool name", func(tx *Tx) error {
				_, err := tx.CreatePool(Pool{Tenant: "acme", Name: "GPU", Site: "rack-1"})
				return err
			}, proto.InvalidInput, "name"},
		}
		for _, st := range steps {
			err := s.Update(st.do)
			if st.code == "" && err != nil || st.code != "" && (proto.CodeOf(err) != st.code || proto.AsError(err).Details.Path != st.path) {
				t.Fatalf("%s: got %v, want %q at %q", st.name, err, st.code, st.path)
			}
		}
		s.View(func(tx *Tx) error {
			pools, err := tx.PoolsAtSite("rack-1")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range pools {
				got = append(got, p.Tenant+"/"+p.Name+" "+strings.Join(p.Policy.PrewarmImages, ","))
			}
			if diff := cmp.Diff([]string{"acme/gpu a@1", "beta/bare ", "beta/gpu "}, got); diff != "" {
				t.Errorf("pools at rack-1 (-want +got):\n%s", diff)
			}
			return nil
		})
	})
}

// TestImageLocationChecks: a location in an unknown state, of a digest that is not one
// or of no source is refused at its field; one is dropped.
func TestImageLocationChecks(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withTenants(t, open, "acme")
		var img Image
		if err := s.Update(func(tx *Tx) (err error) {
			if _, err := tx.CreateSite("rack-1"); err != nil {
				return err
			}
			if img, err = tx.CreateImage(testImage("acme", "a@1", false)); err != nil {
				return err
			}
			_, err = tx.PutSiteLocation(SiteLocation{Site: "rack-1", Digest: img.SHA256, Source: img.Source, State: proto.CacheReady})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []struct {
			loc  SiteLocation
			path string
		}{
			{SiteLocation{Site: "rack-1", Digest: img.SHA256, Source: img.Source, State: "lost"}, "state"},
			{SiteLocation{Site: "rack-1", Digest: "ab", Source: img.Source, State: proto.CacheReady}, "digest"},
			{SiteLocation{Site: "rack-1", Digest: img.SHA256, State: proto.CacheReady}, "source"},
		} {
			err := s.Update(func(tx *Tx) error {
				_, err := tx.PutSiteLocation(bad.loc)
				return err
			})
			if proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != bad.path {
				t.Fatalf("a location of a bad %s: %v, want INVALID_INPUT at %s", bad.path, err, bad.path)
			}
		}
		if err := s.Update(func(tx *Tx) error { return tx.DeleteSiteLocation("rack-1", img.SHA256, img.Source) }); err != nil {
			t.Fatal(err)
		}
		err := s.View(func(tx *Tx) error { _, err := tx.ImageLocation("rack-1", img.ID); return err })
		if proto.CodeOf(err) != proto.NotFound {
			t.Errorf("the dropped location: %v, want NOT_FOUND", err)
		}
	})
}

// TestImageLocationsPage: the images of a site's location page by id, a page at most its
// limit and a cursor to the next while one follows, every image once over the pages, none
// of another site's (rack-10 beside rack-1); the last page offers no cursor.
func TestImageLocationsPage(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withTenants(t, open, "acme")
		var want []string
		if err := s.Update(func(tx *Tx) error {
			for _, site := range []string{"rack-1", "rack-10"} {
				if _, err := tx.CreateSite(site); err != nil {
					return err
				}
			}
			for i := range 5 {
				img, err := tx.CreateImage(testImage("acme", fmt.Sprintf("a@%d", i), false))
				if err != nil {
					return err
				}
				want = append(want, img.ID)
				for _, site := range []string{"rack-1", "rack-10"} {
					if _, err := tx.PutSiteLocation(SiteLocation{Site: site, Digest: img.SHA256, Source: img.Source, State: proto.CacheReady}); err != nil {
						return err
					}
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(want)
		var got []string
		page := Page{Limit: 2}
		for pages := 1; ; pages++ {
			var locs []ImageLocation
			var next string
			if err := s.View(func(tx *Tx) (err error) { locs, next, err = tx.ImageLocationsPage("rack-1", page); return err }); err != nil {
				t.Fatal(err)
			}
			if len(locs) > page.Limit || len(locs) < page.Limit && next != "" {
				t.Fatalf("page %d holds %d locations, cursor %q: want at most %d, and a cursor only after a full page", pages, len(locs), next, page.Limit)
			}
			for _, l := range locs {
				if l.Site != "rack-1" {
					t.Errorf("page %d holds a location at %s", pages, l.Site)
				}
				got = append(got, l.ImageID)
			}
			if next == "" {
				if pages != 3 {
					t.Errorf("%d pages of 2 for 5 locations, want 3", pages)
				}
				break
			}
			page.Cursor = next
		}
		if !slices.Equal(got, want) {
			t.Errorf("the pages hold %v, want %v", got, want)
		}
	})
}

func TestNewIDSortsByTime(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		t0 := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
		prev := newID("img_", t0)
		for _, d := range []time.Duration{time.Millisecond, time.Second, 24 * time.Hour, 50 * 365 * 24 * time.Hour} {
			next := newID("img_", t0.Add(d))
			if next <= prev {
				t.Errorf("id at +%v (%s) does not sort after %s", d, next, prev)
			}
			prev = next
		}
	})
}
