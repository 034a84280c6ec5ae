package image

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/testkit/openssl"
	"github.com/google/go-cmp/cmp"
)

// TestRegisterWithoutSize: an image registered without sizeBytes is stored with its size
// unknown (0, absent from its JSON), and its signature verifies as with one (the signing
// input has no size); an explicit 0 is still refused.
func TestRegisterWithoutSize(t *testing.T) {
	st := openCatalog(t)
	key := newSigner(t, st, "acme", "acme-1", openssl.Ed25519)
	req := osRequest("nosize@1")
	req.SizeBytes = nil
	img := mustRegister(t, st, "acme", sign(t, req, key, "acme-1", formEd25519))
	if img.SizeBytes != 0 || !img.Verified {
		t.Errorf("stored %+v: want size 0 (unknown), verified", img)
	}
	if b, _ := json.Marshal(img); strings.Contains(string(b), "sizeBytes") {
		t.Errorf("the record %s carries a size", b)
	}
	sized := osRequest("sized@1")
	if string(signingInputOf(t, sized)) != strings.Replace(string(signingInputOf(t, req)), "nosize@1", "sized@1", 1) {
		t.Error("the signing input depends on sizeBytes")
	}
	req.Ref, req.SizeBytes = "zero@1", new(int64(0))
	_, err := register(st, "acme", req)
	checkErr(t, err, proto.InvalidInput, "sizeBytes", "")
}

// FuzzRegisterSize decodes images.register bodies as the API does: an absent sizeBytes
// is unknown (0 stored), a given one is stored as given when it is 1 to 2^53-1 and is
// INVALID_INPUT at sizeBytes otherwise.
func FuzzRegisterSize(f *testing.F) {
	for _, s := range []string{``, `,"sizeBytes":1`, `,"sizeBytes":0`, `,"sizeBytes":-1`, `,"sizeBytes":9007199254740991`,
		`,"sizeBytes":9007199254740992`, `,"sizeBytes":null`, `,"sizeBytes":1e3`, `,"sizeBytes":"5"`, `,"sizeBytes":1.5`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, field string) {
		body := `{"ref":"os@1","format":"raw","sha256":"` + digestA + `","source":"https://images.example.com/os.raw"` + field + `}`
		var req RegisterRequest
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			return
		}
		img, _, err := validate(req)
		switch {
		case req.SizeBytes == nil:
			if err != nil || img.SizeBytes != 0 {
				t.Fatalf("%s: %+v, %v: want size unknown", body, img, err)
			}
		case *req.SizeBytes >= 1 && *req.SizeBytes <= proto.MaxImageBytes:
			if err != nil || img.SizeBytes != *req.SizeBytes {
				t.Fatalf("%s: %+v, %v: want size %d", body, img, err, *req.SizeBytes)
			}
		default:
			if e := proto.AsError(err); e == nil || e.Code != proto.InvalidInput || e.Details.Path != "sizeBytes" {
				t.Fatalf("%s: %v: want INVALID_INPUT at sizeBytes", body, err)
			}
		}
	})
}

// TestPlanSiteCacheUnknownSizes: images of unknown size count for nothing against the
// site cache's capacity and are planned while the sized ones leave room; when they leave
// none, those are left out (site-share, saying their size is unknown), never a sized
// image for them. Once the site reports an image ready, the plan counts it at the size
// the site learned.
func TestPlanSiteCacheUnknownSizes(t *testing.T) {
	st := openCatalog(t)
	key := newSigner(t, st, "acme", "acme-1", openssl.P256)
	const gib = 1 << 30
	reg := func(ref, d string, size int64) store.Image {
		req := osRequest(ref)
		req.SHA256, req.SizeBytes = digest(d), nil
		if size > 0 {
			req.SizeBytes = new(size)
		}
		return mustRegister(t, st, "acme", sign(t, req, key, "acme-1", formP1363))
	}
	reg("a@1", "a", gib)
	reg("b@1", "b", gib)
	u := reg("u@1", "c", 0)
	reg("v@1", "d", 0)
	sitesWithPools(t, st, []string{"rack-1"}, []store.Pool{
		{Tenant: "acme", Name: "gpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: []string{"u@1", "a@1", "b@1", "v@1"}}},
	})
	report := func(capacity int64) { t.Helper(); reportCapacity(t, st, "rack-1", capacity) }
	plan := func() (refs []string, left map[string]string) {
		t.Helper()
		p := sitePlan(t, st, "rack-1")
		for _, img := range p.CacheImages {
			refs = append(refs, img.Ref)
			if want := map[string]int64{"a@1": gib, "b@1": gib}[img.Ref]; img.SizeBytes != want {
				t.Errorf("%s is sent with size %d, want the catalog's %d", img.Ref, img.SizeBytes, want)
			}
		}
		left = map[string]string{}
		for _, e := range p.Excluded {
			if e.Reason != proto.ReasonSiteShare {
				t.Fatalf("left out %+v: want reason site-share", e)
			}
			left[e.Ref] = e.Message
		}
		return refs, left
	}

	if refs, left := plan(); len(refs) != 4 || len(left) != 0 {
		t.Fatalf("no capacity reported: planned %v, left out %v: want all 4", refs, left)
	}
	report(3 * gib)
	if refs, left := plan(); len(refs) != 4 || len(left) != 0 {
		t.Fatalf("3 GiB, 2 GiB of them sized: planned %v, left out %v: want all 4", refs, left)
	}
	report(2 * gib)
	refs, left := plan()
	if diff := cmp.Diff([]string{"a@1", "b@1"}, refs); diff != "" {
		t.Errorf("2 GiB, all of them sized: planned (-want +got):\n%s", diff)
	}
	if len(left) != 2 || !strings.Contains(left["u@1"], "u@1's size is unknown") || left["v@1"] == "" {
		t.Errorf("2 GiB: left out %v: want u@1 and v@1, their size unknown", left)
	}

	// The site learned u@1's size pulling it: it is planned at that size, before v@1.
	storetest.Update(t, st, func(tx *store.Tx) error {
		_, err := tx.PutSiteLocation(store.SiteLocation{Site: "rack-1", Digest: u.SHA256, Source: u.Source, State: proto.CacheReady, SizeBytes: gib / 2, LastUsed: time.Now()})
		return err
	})
	report(2*gib + gib/2)
	refs, left = plan()
	if diff := cmp.Diff([]string{"a@1", "b@1", "u@1"}, refs); diff != "" {
		t.Errorf("2.5 GiB, u@1 learned at 0.5 GiB: planned (-want +got):\n%s", diff)
	}
	if _, ok := left["v@1"]; len(left) != 1 || !ok {
		t.Errorf("2.5 GiB: left out %v: want v@1 alone", left)
	}
	report(2 * gib)
	refs, _ = plan()
	if diff := cmp.Diff([]string{"a@1", "u@1"}, refs); diff != "" {
		t.Errorf("2 GiB, u@1 learned at 0.5 GiB: planned (-want +got):\n%s", diff)
	}
}

// The size a site reported is planned for an image only when the site verified that
// image's own source for its digest (its location, syncSite): beta's image of unknown
// size that names acme's cached digest with a source of its own is planned at no size,
// and one naming acme's very source at the size of the bytes that source served, which
// are its own artifact's. So the fallback takes nothing from another tenant's image.
func TestPlannedSizeIsOfTheImagesOwnSource(t *testing.T) {
	f := newSiteFixture(t)
	var own, same string
	storetest.Update(t, f.st, func(tx *store.Tx) error {
		for _, im := range []struct {
			id     *string
			ref    string
			source string
		}{{&own, "own@1", sourceOf("own")}, {&same, "same@1", sourceOf("a")}} {
			req := osRequest(im.ref)
			req.SHA256, req.SizeBytes, req.Source = digest("a"), nil, im.source
			img, err := Register(tx, Allowlist{}, "beta", req)
			if err != nil {
				return err
			}
			*im.id = img.ID
		}
		return nil
	})
	if _, err := f.run(t, step{agent: "a1", entries: []proto.ImageCacheEntry{entry("a", proto.CacheReady)}}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int64{own: 0, same: 100} {
		f.st.View(func(tx *store.Tx) error {
			img, err := tx.Image(id)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := plannedSize(tx, "rack-1", img); got != want || err != nil {
				t.Errorf("beta's %s (source %s) is planned at %d bytes, %v: want %d", img.Ref, img.Source, got, err, want)
			}
			return nil
		})
	}
}
