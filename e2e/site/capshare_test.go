package site

import (
	"crypto/rand"
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
	files := map[string][]byte{}
	for i := range n {
		files[fmt.Sprintf("beta-%d.raw", i)] = make([]byte, size)
		rand.Read(files[fmt.Sprintf("beta-%d.raw", i)])
	}
	s := newSharedSite(t, files)
	admin := s.reg.AdminConfig

	betaKey := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", s.reg.DataDir, "--tenant", "beta", "--id", "beta-key", "--public-key", betaKey.PublicPath)
	var refs []string
	for i := range n {
		ref := fmt.Sprintf("a-big-%d@1", i) // before secret@1 in the plan, so pulled first
		testkit.RegisterImage(t, s.configs["beta"], testkit.Image{Ref: ref, Kind: "os", Source: fmt.Sprintf("%s/beta-%d.raw", s.source.URL, i),
			Format: "raw", Compression: "none", SHA256: testkit.Digest(files[fmt.Sprintf("beta-%d.raw", i)]), Size: size,
			SignerID: "beta-key", Signer: betaKey}, nil)
		refs = append(refs, ref)
	}
	testkit.JSON(t, s.configs["beta"], nil, "pools", "create", "beta-gpu", "--site", "rack-a", "--prewarm", strings.Join(refs, ","))

	startSiteAgent(t, s.reg, s.work, map[string]any{"dir": filepath.Join(s.work, "cache"), "caFile": s.caFile, "capacityBytes": n * size})
	s.waitReady(t)

	var plan api.CachePlan
	testkit.JSON(t, admin, &plan, "sites", "cache-plan", "rack-a")
	var left []string
	for _, e := range plan.Excluded {
		left = append(left, e.Tenant+"/"+e.Ref+" "+e.Reason)
	}
	if want := []string{"beta/a-big-3@1 " + proto.ReasonSiteShare}; fmt.Sprint(left) != fmt.Sprint(want) || len(plan.CacheImages) != n {
		t.Fatalf("rack-a's plan holds %d images and leaves out %v: want beta's last one out as beyond its share", len(plan.CacheImages), left)
	}
}
