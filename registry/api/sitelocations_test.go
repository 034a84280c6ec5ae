package api

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestSiteLocationsPage: sites.locations answers a site's locations a page at a time, as
// the other lists do: of store.MaxPage+1 locations at rack-a, the first page holds
// store.MaxPage and a cursor, the next the last one and none, every location once in
// the order of their digests and none of rack-b's; a limit out of range is INVALID_INPUT
// at limit, and so is the cursor an earlier release gave, an image id, at cursor.
// Before, it answered the site's whole list at once, however long.
func TestSiteLocationsPage(t *testing.T) {
	st, s := serve(t)
	var secret string
	var want []string
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if _, err = tx.CreateTenant(store.RootTenant); err != nil {
			return err
		}
		for _, site := range []string{"rack-a", "rack-b"} {
			if _, err := tx.CreateSite(site); err != nil {
				return err
			}
		}
		if want, err = storetest.Located(tx, "rack-a", store.MaxPage+1); err != nil {
			return err
		}
		img, err := tx.Image(want[0])
		if err != nil {
			return err
		}
		if _, err := tx.PutSiteLocation(store.SiteLocation{Site: "rack-b", Digest: img.SHA256, Source: img.Source, State: proto.CacheReady}); err != nil {
			return err
		}
		_, secret, err = tx.CreateCredential(store.RootTenant, []string{ActionSitesManage}, tx.Now().Add(time.Hour))
		return err
	})
	c := NewHandlerClient(s, secret)
	req := SiteLocationsRequest{SiteID: "rack-a"}
	var got []string
	var sizes []int
	for len(sizes) < 3 {
		var out SiteLocations
		if err := c.Call(context.Background(), "sites.locations", req, &out); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(out.Locations))
		for _, l := range out.Locations {
			if l.Site != "rack-a" {
				t.Errorf("a location at %s in rack-a's pages", l.Site)
			}
			got = append(got, l.ImageID)
		}
		if out.NextCursor == "" {
			break
		}
		req.Cursor = out.NextCursor
	}
	if !slices.Equal(sizes, []int{store.MaxPage, 1}) || !slices.Equal(got, want) {
		t.Errorf("pages of %v locations, %d in all; want pages of [%d 1], the %d locations at rack-a each once by digest", sizes, len(got), store.MaxPage, len(want))
	}
	err := c.Call(context.Background(), "sites.locations", SiteLocationsRequest{SiteID: "rack-a", ListRequest: ListRequest{Limit: store.MaxPage + 1}}, &SiteLocations{})
	if proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "limit" {
		t.Errorf("a limit of %d: %v, want INVALID_INPUT at limit", store.MaxPage+1, err)
	}
	err = c.Call(context.Background(), "sites.locations", SiteLocationsRequest{SiteID: "rack-a", ListRequest: ListRequest{Cursor: store.EncodeCursor([]byte(want[0]))}}, &SiteLocations{})
	if proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "cursor" {
		t.Errorf("the cursor of a listing by image id: %v, want INVALID_INPUT at cursor", err)
	}
}
