package store

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// withTenants opens a store holding the given tenants.
func withTenants(t *testing.T, open opener, tenants ...string) *Store {
	t.Helper()
	s := openTest(t, open)
	if err := s.Update(func(tx *Tx) error {
		for _, tn := range tenants {
			if _, err := tx.CreateTenant(tn); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

func testImage(tenant, ref string, verified bool) Image {
	img := Image{Tenant: tenant, Ref: ref, Kind: proto.KindOS, Format: proto.FormatRaw,
		Compression: proto.CompressionNone, SHA256: fmt.Sprintf("%064x", len(ref)), SizeBytes: 1, Source: "https://x/y"}
	if verified {
		img.Verified, img.SignerID, img.SignerTenant, img.Signature = true, "k", tenant, "c2ln"
	}
	return img
}

func TestImageWritePathRefusesPublicUnsigned(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withTenants(t, open, "acme")
		cases := map[string]struct {
			img  Image
			code proto.Code
		}{
			"private unsigned":        {testImage("acme", "a@1", false), ""},
			"private verified":        {testImage("acme", "b@1", true), ""},
			"public unsigned":         {func() Image { i := testImage("acme", "c@1", false); i.Public = true; return i }(), proto.InvalidState},
			"verified without signer": {func() Image { i := testImage("acme", "d@1", true); i.SignerTenant = ""; return i }(), proto.Internal},
			"unknown tenant":          {testImage("nobody", "e@1", false), proto.NotFound},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				err := s.Update(func(tx *Tx) error { _, err := tx.CreateImage(tc.img); return err })
				if got := codeOrEmpty(err); got != tc.code {
					t.Fatalf("got %v, want %q", err, tc.code)
				}
			})
		}
		var unsignedID, signedID string
		s.View(func(tx *Tx) error {
			a, _ := tx.ImageByRef("acme", "a@1")
			b, _ := tx.ImageByRef("acme", "b@1")
			unsignedID, signedID = a.ID, b.ID
			return nil
		})
		if err := s.Update(func(tx *Tx) error { _, err := tx.PublishImage(unsignedID); return err }); proto.CodeOf(err) != proto.InvalidState {
			t.Errorf("publishing an unsigned image: got %v, want INVALID_STATE", err)
		}
		if err := s.Update(func(tx *Tx) error { _, err := tx.PublishImage(signedID); return err }); err != nil {
			t.Errorf("publishing a verified image: %v", err)
		}
		if err := s.Update(func(tx *Tx) error { _, err := tx.CreateImage(testImage("acme", "a@1", true)); return err }); proto.CodeOf(err) != proto.Conflict {
			t.Errorf("duplicate ref: got %v, want CONFLICT", err)
		}
	})
}

func codeOrEmpty(err error) proto.Code {
	if err == nil {
		return ""
	}
	return proto.CodeOf(err)
}

func TestImageIDs(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withTenants(t, open, "acme")
		var ids []string
		s.Update(func(tx *Tx) error {
			for i := range 3 {
				img, err := tx.CreateImage(testImage("acme", fmt.Sprintf("n@%d", i), false))
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, img.ID)
			}
			return nil
		})
		for _, id := range ids {
			if !regexp.MustCompile(`^img_[0-9a-hjkmnp-tv-z]{26}$`).MatchString(id) {
				t.Errorf("id %q", id)
			}
		}
		if ids[0] == ids[1] || ids[1] == ids[2] {
			t.Errorf("ids repeat: %v", ids)
		}
	})
}

// TestImagesListMergesOwnAndPublic pages through a tenant's view of a catalog where
// its own, public and other tenants' private images interleave by ref.
func TestImagesListMergesOwnAndPublic(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withTenants(t, open, "acme", "beta")
		var want []string
		s.Update(func(tx *Tx) error {
			for i := range 450 {
				ref := fmt.Sprintf("img%04d@1", i)
				var img Image
				switch i % 3 {
				case 0:
					img = testImage("acme", ref, i%2 == 0)
					want = append(want, ref)
				case 1:
					img = testImage("beta", ref, true)
					want = append(want, ref)
				case 2:
					img = testImage("beta", ref, false)
				}
				if i%5 == 0 {
					img.Kind = proto.KindRamdisk
				}
				made, err := tx.CreateImage(img)
				if err != nil {
					t.Fatal(err)
				}
				if i%3 == 1 {
					if _, err := tx.PublishImage(made.ID); err != nil {
						t.Fatal(err)
					}
				}
			}
			return nil
		})
		list := func(kind proto.ImageKind, limit int) (refs []string, pages int) {
			cursor := ""
			for {
				var got []Image
				var err error
				s.View(func(tx *Tx) error {
					got, cursor, err = tx.Images("acme", kind, Page{Cursor: cursor, Limit: limit})
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				pages++
				for _, img := range got {
					refs = append(refs, img.Ref)
				}
				if cursor == "" {
					return refs, pages
				}
			}
		}
		got, pages := list("", 0)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("acme's view (-want +got):\n%s", diff)
		}
		if pages != 2 {
			t.Errorf("%d pages of 200 for %d images", pages, len(got))
		}
		var wantRamdisks []string
		for _, r := range want {
			var i int
			fmt.Sscanf(r, "img%04d@1", &i)
			if i%5 == 0 {
				wantRamdisks = append(wantRamdisks, r)
			}
		}
		got, _ = list(proto.KindRamdisk, 7)
		if diff := cmp.Diff(wantRamdisks, got); diff != "" {
			t.Errorf("acme's ramdisks (-want +got):\n%s", diff)
		}
	})
}
