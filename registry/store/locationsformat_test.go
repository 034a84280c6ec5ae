package store

import (
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// TestAStoreOfFormat5HasItsLocationsMovedAsItIsRaised: a store of format 5 holds a
// location for each image at a site, 1,200 images of one digest and source (three
// tenants') and one of another source, more than one transaction of the raise moves, and
// one naming an image no longer stored. Raised, on both backends, each site holds one
// location for the digest and source, which locates each of its images: the state of the
// one written last, the latest use of any; the image of the other source keeps its own;
// none is left of format 5, and Check finds nothing. Check then reports a location of
// format 5 left behind and one no catalog image has.
func TestAStoreOfFormat5HasItsLocationsMovedAsItIsRaised(t *testing.T) {
	eachPlace(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		d := strings.Repeat("1", 64)
		digestImages(t, s, d, []string{"acme", "beta", "gamma"}, 400)
		var imgs []Image
		var other Image
		t0 := clk.Now()
		mustUpdate(t, s, func(tx *Tx) (err error) {
			for _, site := range []string{"rack-1", "rack-2"} {
				if _, err := tx.CreateSite(site); err != nil {
					return err
				}
			}
			if imgs, err = tx.ImagesByDigest(d); err != nil {
				return err
			}
			img := testImage("acme", "other@1", false)
			img.SHA256, img.Source = d, "https://z/w"
			other, err = tx.CreateImage(img)
			return err
		})
		// As a release of format 5 left them: one location an image, the last written
		// evicting, the latest use another's.
		old := func(site string, img Image, state proto.ImageCacheState, used, updated time.Time) ImageLocation {
			return SiteLocation{Site: site, Digest: img.SHA256, State: state, SizeBytes: 100, LastUsed: used, UpdatedAt: updated}.of(img)
		}
		var olds []ImageLocation
		for _, img := range imgs {
			olds = append(olds, old("rack-1", img, proto.CacheReady, t0, t0))
		}
		olds[7] = old("rack-1", imgs[7], proto.CacheEvicting, t0, t0.Add(time.Hour))
		olds[9].LastUsed = t0.Add(2 * time.Hour)
		for _, img := range imgs[:3] {
			olds = append(olds, old("rack-2", img, proto.CacheReady, t0, t0))
		}
		olds = append(olds, old("rack-1", other, proto.CacheFailed, t0, t0), old("rack-1", Image{ID: "img_gone", SHA256: d}, proto.CacheReady, t0, t0))
		for i := 0; i < len(olds); i += 500 {
			mustUpdate(t, s, func(tx *Tx) error {
				for _, loc := range olds[i:min(i+500, len(olds))] {
					if err := tx.put(bucketImageLocations, []byte(loc.Site+"\x00"+loc.ImageID), loc); err != nil {
						return err
					}
				}
				return nil
			})
		}
		s = raisedFrom(t, s, open, clk.Now, "5")
		s.View(func(tx *Tx) error {
			if left, _, _ := tx.imageLocationsLeft(); len(left) != 0 {
				t.Errorf("%d locations of format 5 left after the raise", len(left))
			}
			for site, want := range map[string]int{"rack-1": 2, "rack-2": 1} {
				if locs, err := tx.SiteLocations(site); err != nil || len(locs) != want {
					t.Errorf("%s holds %d locations (%v); want %d: one a digest and source", site, len(locs), err, want)
				}
			}
			for _, img := range append(imgs, other) {
				loc, err := tx.ImageLocation("rack-1", img.ID)
				if err != nil {
					t.Fatalf("%s at rack-1: %v", img.ID, err)
				}
				want := ImageLocation{SiteLocation{Site: "rack-1", Digest: d, Source: "https://x/y", State: proto.CacheEvicting, SizeBytes: 100,
					LastUsed: t0.Add(2 * time.Hour), UpdatedAt: t0.Add(time.Hour)}, loc.ImageID}
				if loc.ImageID == other.ID {
					want.Source, want.State, want.LastUsed, want.UpdatedAt = other.Source, proto.CacheFailed, t0, t0
				}
				if !loc.LastUsed.Equal(want.LastUsed) || !loc.UpdatedAt.Equal(want.UpdatedAt) {
					t.Fatalf("%s at rack-1: used %v, updated %v; want %v, %v", loc.ImageID, loc.LastUsed, loc.UpdatedAt, want.LastUsed, want.UpdatedAt)
				}
				loc.LastUsed, loc.UpdatedAt, want.LastUsed, want.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
				if loc != want {
					t.Fatalf("%s at rack-1: %+v; want %+v", loc.ImageID, loc, want)
				}
			}
			return nil
		})

		mustUpdate(t, s, func(tx *Tx) error {
			if err := tx.put(bucketImageLocations, []byte("rack-1\x00"+imgs[0].ID), olds[0]); err != nil {
				return err
			}
			_, err := tx.PutSiteLocation(SiteLocation{Site: "rack-2", Digest: d, Source: "https://nobody/s", State: proto.CacheReady})
			return err
		})
		err := s.Check()
		for _, want := range []string{"was not moved into site_locations", "names no site and catalog image of that digest and source"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Check of a location of format 5 left and one of no image: %v; want %q", err, want)
			}
		}
	})
}
