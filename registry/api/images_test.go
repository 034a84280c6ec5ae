package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestImagesListOffersACursorOnlyBeforeAMatch: images.list with a kind filter offers a
// next cursor only when an image of that kind follows the page; images of another kind
// sorting after it do not lead the caller to an empty page.
func TestImagesListOffersACursorOnlyBeforeAMatch(t *testing.T) {
	st, s := serve(t)
	var secret string
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if _, err = tx.CreateTenant(store.RootTenant); err != nil {
			return err
		}
		for ref, kind := range map[string]proto.ImageKind{"alpha@1": proto.KindOS, "beta@1": proto.KindOS, "zeta@1": proto.KindRamdisk} {
			img := store.Image{Tenant: store.RootTenant, Ref: ref, Kind: kind, Format: proto.FormatRaw,
				SHA256: strings.Repeat("a", 64), Source: "https://images.example.com/" + ref}
			if _, err = tx.CreateImage(img); err != nil {
				return err
			}
		}
		_, secret, err = tx.CreateCredential(store.RootTenant, []string{ActionImagesRead}, tx.Now().Add(time.Hour))
		return err
	})
	c := NewHandlerClient(s, secret)
	var refs []string
	pages := 0
	req := ListImagesRequest{Kind: proto.KindOS, ListRequest: ListRequest{Limit: 1}}
	for {
		var page ImageList
		if err := c.Call(context.Background(), "images.list", req, &page); err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page.Images) == 0 {
			t.Errorf("page %d is empty: the cursor before it was offered with no os image after it", pages)
		}
		for _, img := range page.Images {
			refs = append(refs, img.Ref)
		}
		if page.NextCursor == "" || pages > 3 {
			break
		}
		req.Cursor = page.NextCursor
	}
	if got := strings.Join(refs, " "); got != "alpha@1 beta@1" || pages != 2 {
		t.Errorf("os images %q in %d pages, want alpha@1 beta@1 in 2", got, pages)
	}
}
