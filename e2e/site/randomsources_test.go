package site

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// TestATenantsRandomSourcesLeaveTheSiteItsImagesReport: tenant beta, with its own
// credential and signer, registers 640 images of one byte from sources of about 2,000
// random characters, 16 sources to each of 40 artifacts, and pre-warms them at rack-a in
// two rounds within its share of the site's plan, then clears its pools: the site's cache
// keeps every artifact ready. The `images` section (about 1.3 MB, within its 1.5 MiB
// budget) does not compress, so before, the registry refused it as larger than a stored
// section may be and kept the copy stored before: acme's image pre-warmed afterwards was
// pulled but never located, and its deploys would have fetched from its source. Now the
// site cuts the section until its stored form fits, keeping the images of its cache plan
// first: the section is stored, not refused, and names acme's new image as ready.
func TestATenantsRandomSourcesLeaveTheSiteItsImagesReport(t *testing.T) {
	const artifacts, sourcesEach, rounds = 40, proto.MaxImageCacheSources, 2
	files := map[string][]byte{}
	s := newSharedSite(t, files)
	reg, admin, work, configs := s.reg, s.reg.AdminConfig, s.work, s.configs
	paths := make([][]string, artifacts)
	for d := range artifacts {
		for j := range sourcesEach {
			// Six random bits a character: compressed, in base64, no smaller.
			pad := make([]byte, 1500)
			rand.Read(pad)
			paths[d] = append(paths[d], fmt.Sprintf("%s/%03d-%02d.raw", base64.RawURLEncoding.EncodeToString(pad), d, j))
			files[paths[d][j]] = []byte{byte(d)}
		}
	}
	fresh := make([]byte, 64<<10) // acme's image pre-warmed after beta's flood
	rand.Read(fresh)
	files["fresh.raw"] = fresh
	// Nothing writes files from here on: the source serves it as it is.
	sa := startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache"), "caFile": s.caFile})
	s.waitReady(t)

	s.keepBetasImages(t, sa, paths, rounds)

	testkit.RegisterImage(t, configs["acme"], testkit.Image{Ref: "fresh@1", Kind: "os", Source: s.source.URL + "/fresh.raw", Format: "raw",
		Compression: "none", SHA256: testkit.Digest(fresh), Size: int64(len(fresh)), SignerID: "acme-key", Signer: s.acmeKey}, nil)
	testkit.JSON(t, configs["acme"], nil, "pools", "update", "acme-gpu", "--prewarm", "secret@1,fresh@1")
	var (
		inv     api.SiteInventory
		info    proto.SiteInventory
		refused *api.SectionRefused
		held    int
	)
	// Read until the `site` section counts what the images section leaves out: the two
	// are stored one after the other, in an order that keeps the images section never cut
	// more than the `site` section says, and a read may come between.
	waitFor(t, "rack-a's images section stored with acme's fresh@1 ready, counted by its site section", func() bool {
		testkit.JSON(t, admin, &inv, "sites", "inventory", "rack-a")
		found := false
		info = proto.SiteInventory{}
		for _, sec := range inv.Sections {
			switch sec.Section {
			case proto.SectionSite:
				json.Unmarshal(sec.Data, &info)
			case proto.SectionImages:
				var images []proto.ImageCacheEntry
				json.Unmarshal(sec.Data, &images)
				refused, held = sec.Refused, len(images)
				for _, e := range images {
					found = found || e.Digest == testkit.Digest(fresh) && e.State == proto.CacheReady
				}
			}
		}
		return found && refused == nil && held+info.Omitted[proto.SectionImages] == artifacts+2
	})
	if !info.SectionCut(proto.SectionImages) || held+info.Omitted[proto.SectionImages] != artifacts+2 {
		t.Errorf("rack-a's images section holds %d images, omitted %v: want it cut, its left-out entries counted, out of %d", held, info.Omitted, artifacts+2)
	}
	waitFor(t, "acme's fresh@1 located at rack-a", func() bool {
		for _, l := range allLocations(t, admin, "rack-a") {
			if l.State == proto.CacheReady && l.Digest == testkit.Digest(fresh) {
				return true
			}
		}
		return false
	})
}
