package site

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// TestATenantsPrewarmLeavesAnotherTenantRoomInTheSiteCache: rack-a's cache holds 256
// KiB. Tenant acme pre-warms one 64 KiB image there; tenant beta, with its own
// credential and signer, pre-warms four 64 KiB images, listed before acme's. Pre-warmed
// images are never evicted for one another, so beta's filled the cache and acme's pull
// failed with reason capacity. Now the real `bcd site` reports its cache's capacity and
// the registry's plan leaves out beta's last image (reason site-share, shown in `sites
// cache-plan`): acme's image is pulled and ready at the site.
func TestATenantsPrewarmLeavesAnotherTenantRoomInTheSiteCache(t *testing.T) {
	const n, size = 4, 64 << 10
	s := newBetaFillsSite(t, n, size)
	startSiteAgent(t, s.reg, s.work, map[string]any{"dir": filepath.Join(s.work, "cache"), "caFile": s.caFile, "capacityBytes": n * size})
	s.waitReady(t)
	betasLastLeftOut(t, s, n)
}

// TestACacheWithNoCapacityIsPlannedWithinItsFilesystem: rack-a's cache has no capacity
// and lives on a real 64 MiB filesystem (its default reserve a quarter of it: 48 MiB for
// images). Beta pre-warms four 12 MiB images there, listed before acme's 64 KiB one. The
// site reported no bound, so the registry planned all five, and pull order, not the
// tenants' shares, decided which the filesystem took: the last pull that did not fit
// failed with reason capacity (beta's fourth here; acme's, had beta's filled the room
// exactly). Now the real `bcd site` reports what its cache can hold, within the
// filesystem, and the plan leaves out beta's last image (reason site-share): every
// planned image is ready at the site, acme's too, and none failed.
func TestACacheWithNoCapacityIsPlannedWithinItsFilesystem(t *testing.T) {
	const n, size, fsBytes = 4, 12 << 20, 64 << 20
	cacheFS := testkit.SmallFS(t, fsBytes)
	s := newBetaFillsSite(t, n, size)
	startSiteAgent(t, s.reg, s.work, map[string]any{"dir": filepath.Join(cacheFS, "cache"), "caFile": s.caFile})
	s.waitReady(t)

	var inv api.SiteInventory
	testkit.JSON(t, s.reg.AdminConfig, &inv, "sites", "inventory", "rack-a")
	var reported proto.SiteInventory
	for _, sec := range inv.Sections {
		if sec.Section == proto.SectionSite {
			if err := json.Unmarshal(sec.Data, &reported); err != nil {
				t.Fatal(err)
			}
		}
	}
	if c := reported.CacheCapacityBytes; c <= 0 || c > fsBytes-fsBytes/4 || reported.CacheConfiguredCapacityBytes != 0 {
		t.Errorf("rack-a reports a cache capacity of %d (configured %d), want one within its %d byte filesystem less the reserve, and none configured",
			c, reported.CacheConfiguredCapacityBytes, fsBytes)
	}
	plan := betasLastLeftOut(t, s, n)
	waitFor(t, "every planned image ready at rack-a, none failed", func() bool {
		var locs struct{ Locations []api.ImageLocation }
		testkit.JSON(t, s.reg.AdminConfig, &locs, "sites", "locations", "rack-a")
		ready := 0
		for _, l := range locs.Locations {
			if l.State == proto.CacheFailed {
				t.Fatalf("image %s failed at rack-a (reason %q): the plan does not fit what the cache can hold", l.Digest, l.Reason)
			}
			if l.State == proto.CacheReady {
				ready++
			}
		}
		return ready == len(plan.CacheImages)
	})
}

// newBetaFillsSite is the shared site (newSharedSite) where tenant beta, with its own
// signer, also pre-warms n images of size bytes (a-big-0@1 and on, listed before acme's
// secret@1, so pulled first).
func newBetaFillsSite(t *testing.T, n, size int) sharedSite {
	t.Helper()
	files := map[string][]byte{}
	for i := range n {
		files[fmt.Sprintf("beta-%d.raw", i)] = make([]byte, size)
		rand.Read(files[fmt.Sprintf("beta-%d.raw", i)])
	}
	s := newSharedSite(t, files)
	betaKey := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, s.reg.AdminConfig, nil, "signers", "add", "--data-dir", s.reg.DataDir, "--tenant", "beta", "--id", "beta-key", "--public-key", betaKey.PublicPath)
	var refs []string
	for i := range n {
		ref := fmt.Sprintf("a-big-%d@1", i)
		testkit.RegisterImage(t, s.configs["beta"], testkit.Image{Ref: ref, Kind: "os", Source: fmt.Sprintf("%s/beta-%d.raw", s.source.URL, i),
			Format: "raw", Compression: "none", SHA256: testkit.Digest(files[fmt.Sprintf("beta-%d.raw", i)]), Size: int64(size),
			SignerID: "beta-key", Signer: betaKey}, nil)
		refs = append(refs, ref)
	}
	testkit.JSON(t, s.configs["beta"], nil, "pools", "create", "beta-gpu", "--site", "rack-a", "--prewarm", strings.Join(refs, ","))
	return s
}

// betasLastLeftOut is rack-a's plan (`sites cache-plan`), which must leave out beta's
// last of its n images alone, as beyond its share of the site's cache (site-share).
func betasLastLeftOut(t *testing.T, s sharedSite, n int) api.CachePlan {
	t.Helper()
	var plan api.CachePlan
	testkit.JSON(t, s.reg.AdminConfig, &plan, "sites", "cache-plan", "rack-a")
	var left []string
	for _, e := range plan.Excluded {
		left = append(left, e.Tenant+"/"+e.Ref+" "+e.Reason)
	}
	if want := []string{fmt.Sprintf("beta/a-big-%d@1 %s", n-1, proto.ReasonSiteShare)}; fmt.Sprint(left) != fmt.Sprint(want) || len(plan.CacheImages) != n {
		t.Fatalf("rack-a's plan holds %d images and leaves out %v: want beta's last one out as beyond its share", len(plan.CacheImages), left)
	}
	return plan
}
