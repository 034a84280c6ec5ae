package image

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/testkit/openssl"
	"github.com/google/go-cmp/cmp"
)

func TestPlanSiteCache(t *testing.T) {
	st := openCatalog(t)
	platform := newSigner(t, st, store.RootTenant, "platform", openssl.Ed25519)
	acmeKey := newSigner(t, st, "acme", "acme-1", openssl.P256)
	gone := newSigner(t, st, "acme", "acme-gone", openssl.Ed25519)
	betaKey := newSigner(t, st, "beta", "beta-1", openssl.P256)

	withDigest := func(req RegisterRequest, d string) RegisterRequest { req.SHA256 = digest(d); return req }
	base := mustRegister(t, st, store.RootTenant, sign(t, withDigest(osRequest("base@1"), "1"), platform, "platform", formEd25519))
	storetest.Update(t, st, func(tx *store.Tx) error { _, err := Promote(tx, store.RootTenant, base.ID); return err })
	own := mustRegister(t, st, "acme", sign(t, withDigest(osRequest("own@1"), "2"), acmeKey, "acme-1", formP1363))
	mustRegister(t, st, "acme", withDigest(osRequest("unsigned@1"), "3"))
	mustRegister(t, st, "acme", sign(t, withDigest(osRequest("revoked@1"), "4"), gone, "acme-gone", formEd25519))
	revokeSigner(t, st, "acme", "acme-gone")
	// beta's own (unsigned) base@1 shadows the platform's in beta's pools.
	mustRegister(t, st, "beta", withDigest(osRequest("base@1"), "5"))
	// acme's public image, vouched for by acme's key only.
	pub := mustRegister(t, st, "acme", sign(t, withDigest(osRequest("pub@1"), "6"), acmeKey, "acme-1", formP1363))
	storetest.Update(t, st, func(tx *store.Tx) error { _, err := Promote(tx, "acme", pub.ID); return err })
	// beta's own image of acme's digest "2", from its own source: listed apart, so the
	// cache checks beta's source before its copy serves beta's image.
	theirs := mustRegister(t, st, "beta", sign(t, withDigest(osRequest("theirs@1"), "2"), betaKey, "beta-1", formP1363))

	sitesWithPools(t, st, []string{"rack-1", "rack-2"}, []store.Pool{
		{Tenant: "acme", Name: "gpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: []string{"own@1", "unsigned@1", "missing@1", "base@1", "revoked@1"}}},
		{Tenant: "acme", Name: "cpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: []string{"own@1"}}},
		{Tenant: "beta", Name: "gpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: []string{"own@1", "base@1", "pub@1", "acme/pub@1", "acme/own@1", "theirs@1"}}},
		{Tenant: "acme", Name: "far", Site: "rack-2", Policy: store.PoolPolicy{PrewarmImages: []string{"unsigned@1"}}},
	})

	var plan CachePlan
	if err := st.View(func(tx *store.Tx) (err error) { plan, err = PlanSiteCache(tx, "rack-1", Allowlist{}); return err }); err != nil {
		t.Fatal(err)
	}
	want := []proto.CacheImage{
		{Ref: "base@1", Digest: digest("1"), Source: base.Source, SizeBytes: base.SizeBytes, Format: proto.FormatRaw, Compression: proto.CompressionZstd},
		{Ref: "own@1", Digest: digest("2"), Source: own.Source, SizeBytes: own.SizeBytes, Format: proto.FormatRaw, Compression: proto.CompressionZstd},
		{Ref: "theirs@1", Digest: digest("2"), Source: theirs.Source, SizeBytes: theirs.SizeBytes, Format: proto.FormatRaw, Compression: proto.CompressionZstd},
	}
	if diff := cmp.Diff(want, plan.CacheImages); diff != "" {
		t.Errorf("cache images (-want +got):\n%s", diff)
	}
	type ex struct{ Tenant, Pool, Ref, Reason string }
	var excluded []ex
	for _, e := range plan.Excluded {
		excluded = append(excluded, ex{e.Tenant, e.Pool, e.Ref, e.Reason})
	}
	wantExcluded := []ex{
		{"acme", "gpu", "unsigned@1", "unsigned"},
		{"acme", "gpu", "missing@1", "not-found"},
		{"acme", "gpu", "revoked@1", "signature"},
		{"beta", "gpu", "own@1", "not-found"}, // acme's private image is not beta's
		{"beta", "gpu", "base@1", "unsigned"}, // beta's own unsigned base@1 shadows the platform's
		{"beta", "gpu", "pub@1", "not-found"}, // acme's public image is not what beta's bare ref names
		{"beta", "gpu", "acme/pub@1", "untrusted-signer"},
		{"beta", "gpu", "acme/own@1", "not-found"},
	}
	if diff := cmp.Diff(wantExcluded, excluded); diff != "" {
		t.Errorf("excluded (-want +got):\n%s", diff)
	}
	var images []proto.CacheImage
	st.View(func(tx *store.Tx) (err error) { images, err = SiteCacheImages(tx, "rack-2", Allowlist{}); return err })
	if len(images) != 0 {
		t.Errorf("rack-2 caches %v", images)
	}
	err := st.View(func(tx *store.Tx) error { _, err := PlanSiteCache(tx, "rack-9", Allowlist{}); return err })
	checkErr(t, err, proto.NotFound, "", "")
}

// TestPlanSiteCacheSources: a pre-warm image is fetched only from a source host the
// site's image sources allow, and the pool's when it narrows them; a site without image
// sources pre-warms nothing.
func TestPlanSiteCacheSources(t *testing.T) {
	st := openCatalog(t)
	platform := newSigner(t, st, store.RootTenant, "platform", openssl.Ed25519)
	for i, img := range []struct{ ref, source string }{
		{"public@1", "https://images.example.com/public.raw.zst"},
		{"internal@1", "https://10.0.0.9/metadata.raw.zst"},
		{"mirror@1", "oci://mirror.corp.example:5000/os@sha256:" + digest("3")},
		{"ported@1", "https://images.example.com:8443/ported.raw.zst"},
	} {
		req := osRequest(img.ref)
		req.Source, req.SHA256 = img.source, digest(fmt.Sprint(i+1))
		mustRegister(t, st, store.RootTenant, sign(t, req, platform, "platform", formEd25519))
	}
	all := []string{"public@1", "internal@1", "mirror@1", "ported@1"}
	storetest.Update(t, st, func(tx *store.Tx) error {
		for _, s := range []string{"open", "closed"} {
			if _, err := tx.CreateSite(s); err != nil {
				return err
			}
		}
		if _, err := tx.SetSiteImageSources("open", []string{"images.example.com", "*.corp.example:5000"}); err != nil {
			return err
		}
		for _, p := range []store.Pool{
			{Tenant: store.RootTenant, Name: "wide", Site: "open", Policy: store.PoolPolicy{PrewarmImages: all}},
			// narrow keeps the mirror only, and cannot widen the site's list to 10.0.0.9.
			{Tenant: store.RootTenant, Name: "narrow", Site: "open", Policy: store.PoolPolicy{PrewarmImages: all, ImageSources: []string{"mirror.corp.example:5000", "10.0.0.9"}}},
			{Tenant: store.RootTenant, Name: "shut", Site: "closed", Policy: store.PoolPolicy{PrewarmImages: all}},
		} {
			if _, err := tx.CreatePool(p); err != nil {
				return err
			}
		}
		return nil
	})
	type ex struct{ Pool, Ref, Reason string }
	plan := func(site string) (cached []string, excluded []ex) {
		p := sitePlan(t, st, site)
		for _, c := range p.CacheImages {
			cached = append(cached, c.Ref)
		}
		for _, e := range p.Excluded {
			if e.Reason == proto.ReasonSourceNotAllowed && !strings.Contains(e.Message, "source host") {
				t.Errorf("%s: the message does not name the source host: %s", e.Ref, e.Message)
			}
			excluded = append(excluded, ex{e.Pool, e.Ref, e.Reason})
		}
		return cached, excluded
	}
	cached, excluded := plan("open")
	if diff := cmp.Diff([]string{"mirror@1", "public@1"}, cached); diff != "" {
		t.Errorf("open caches (-want +got):\n%s", diff)
	}
	const no = proto.ReasonSourceNotAllowed
	want := []ex{{"narrow", "public@1", no}, {"narrow", "internal@1", no}, {"narrow", "ported@1", no}, {"wide", "internal@1", no}, {"wide", "ported@1", no}}
	if diff := cmp.Diff(want, excluded); diff != "" {
		t.Errorf("open leaves out (-want +got):\n%s", diff)
	}
	cached, excluded = plan("closed")
	if len(cached) != 0 || len(excluded) != len(all) {
		t.Errorf("a site without image sources caches %v, leaves out %v", cached, excluded)
	}
	// Bad patterns are refused where they are written, and change nothing.
	err := st.Update(func(tx *store.Tx) error {
		_, err := tx.SetSiteImageSources("open", []string{"ok.example", "https://x"})
		return err
	})
	checkErr(t, err, proto.InvalidInput, "imageSources[1]", "")
	err = st.Update(func(tx *store.Tx) error {
		_, err := tx.SetPoolPolicy(store.RootTenant, "wide", store.PoolPolicy{ImageSources: []string{"*"}})
		return err
	})
	checkErr(t, err, proto.InvalidInput, "policy.imageSources[0]", "")
	if cached, _ = plan("open"); len(cached) != 2 {
		t.Errorf("a refused write changed the plan: %v", cached)
	}
}

// TestPlanSiteCacheRamdiskExtras: a pool's ramdisk extras are cached only when each is
// an image of kind ramdisk a platform signer vouches for: a tenant's own signed OS image,
// an unsigned ramdisk row and a ramdisk row signed by a tenant's key are each left out
// with the reason.
func TestPlanSiteCacheRamdiskExtras(t *testing.T) {
	st := openCatalog(t)
	platform := newSigner(t, st, store.RootTenant, "platform", openssl.Ed25519)
	acmeKey := newSigner(t, st, "acme", "acme-1", openssl.P256)
	ramdisk := func(ref, d string) RegisterRequest {
		req := osRequest(ref)
		req.Kind, req.Compression, req.SHA256 = proto.KindRamdisk, proto.CompressionNone, digest(d)
		return req
	}
	dcgm := mustRegister(t, st, store.RootTenant, sign(t, ramdisk("nvidia-dcgm@2026.09", "1"), platform, "platform", formEd25519))
	storetest.Update(t, st, func(tx *store.Tx) error { _, err := Promote(tx, store.RootTenant, dcgm.ID); return err })
	own := osRequest("own-initrd@1")
	own.SHA256 = digest("2")
	mustRegister(t, st, "acme", sign(t, own, acmeKey, "acme-1", formP1363))
	// Rows Register never makes, as a restored or edited catalog could hold them.
	tenantSigned := ramdisk("tenant-initrd@1", "4")
	tenantSigned = sign(t, tenantSigned, acmeKey, "acme-1", formP1363)
	storetest.Update(t, st, func(tx *store.Tx) error {
		for _, req := range []RegisterRequest{ramdisk("unsigned-initrd@1", "3"), tenantSigned} {
			img, _, err := validate(req)
			if err != nil {
				return err
			}
			img.Tenant = "acme"
			if img.SignerID != "" {
				img.Signature, img.SignerTenant, img.Verified = req.Signature, "acme", true
			}
			if _, err := tx.CreateImage(img); err != nil {
				return err
			}
		}
		if _, err := tx.CreateSite("rack-1"); err != nil {
			return err
		}
		if _, err := tx.SetSiteImageSources("rack-1", []string{"images.example.com"}); err != nil {
			return err
		}
		_, err := tx.CreatePool(store.Pool{Tenant: "acme", Name: "gpu", Site: "rack-1", Policy: store.PoolPolicy{
			RamdiskExtras: []string{"nvidia-dcgm@2026.09", "own-initrd@1", "unsigned-initrd@1", "tenant-initrd@1"}}})
		return err
	})
	var plan CachePlan
	if err := st.View(func(tx *store.Tx) (err error) { plan, err = PlanSiteCache(tx, "rack-1", Allowlist{}); return err }); err != nil {
		t.Fatal(err)
	}
	want := []proto.CacheImage{{Ref: "nvidia-dcgm@2026.09", Digest: digest("1"), Source: dcgm.Source, SizeBytes: dcgm.SizeBytes, Format: proto.FormatRaw, Compression: proto.CompressionNone}}
	if diff := cmp.Diff(want, plan.CacheImages); diff != "" {
		t.Errorf("cache images (-want +got):\n%s", diff)
	}
	var excluded []string
	for _, e := range plan.Excluded {
		excluded = append(excluded, e.Ref+" "+e.Reason)
	}
	wantExcluded := []string{"own-initrd@1 not-ramdisk", "unsigned-initrd@1 unsigned", "tenant-initrd@1 signature"}
	if diff := cmp.Diff(wantExcluded, excluded); diff != "" {
		t.Errorf("excluded (-want +got):\n%s", diff)
	}
}

// TestTrimToShare: over the site's bounds, only the tenant listing the most loses
// entries, its pre-warm images before its ramdisk extras, until the plan fits; a tenant
// within its share keeps its whole list.
func TestTrimToShare(t *testing.T) {
	list := func(tenant string, n, extras, srcLen int) *tenantPlan {
		l := &tenantPlan{listed: map[[2]string]bool{}}
		for i := range n {
			l.add(planned{pool: tenant + "-pool", ref: fmt.Sprintf("%s-%d@1", tenant, i), extra: i < extras, image: proto.CacheImage{
				Ref: fmt.Sprintf("%s-%d@1", tenant, i), Digest: fmt.Sprintf("%064x", i), Source: fmt.Sprintf("https://s/%s/%d/%s", tenant, i, strings.Repeat("x", srcLen))}})
		}
		return l
	}
	kept := func(lists map[string]*tenantPlan) map[string]int {
		out := map[string]int{}
		for tn, l := range lists {
			out[tn] = len(l.entries)
		}
		return out
	}

	lists := map[string]*tenantPlan{"acme": list("acme", 10, 0, 0), "beta": list("beta", 2000, 8, 0)}
	out := trimToShare("rack-a", lists, 0)
	if got := kept(lists); got["acme"] != 10 || got["beta"] != maxSiteCacheImages-10 {
		t.Fatalf("kept %v: want acme's 10 and beta's first %d", got, maxSiteCacheImages-10)
	}
	for _, e := range out {
		if e.Tenant != "beta" || e.Reason != proto.ReasonSiteShare {
			t.Fatalf("left out %+v: only beta's, reason site-share", e)
		}
	}
	for _, e := range lists["beta"].entries[:8] {
		if !e.extra {
			t.Fatalf("beta's entries %v: its ramdisk extras first, kept", lists["beta"].entries[:8])
		}
	}

	// Two tenants over their share both come down to it; one under it keeps its list.
	lists = map[string]*tenantPlan{"acme": list("acme", 100, 0, 0), "beta": list("beta", 900, 0, 0), "gamma": list("gamma", 900, 0, 0)}
	trimToShare("rack-a", lists, 0)
	if got := kept(lists); got["acme"] != 100 || got["beta"]+got["gamma"] != maxSiteCacheImages-100 || got["beta"]-got["gamma"] > 1 || got["gamma"]-got["beta"] > 1 {
		t.Fatalf("kept %v: want acme's 100 and the rest shared by beta and gamma", got)
	}

	// By bytes: beta's 2 KB sources, acme's short ones.
	lists = map[string]*tenantPlan{"acme": list("acme", 100, 0, 0), "beta": list("beta", 900, 0, 2000)}
	trimToShare("rack-a", lists, 0)
	bytes := 0
	for _, l := range lists {
		for _, e := range l.entries {
			bytes += e.bytes
		}
	}
	if got := kept(lists); got["acme"] != 100 || bytes > maxSiteCacheBytes || got["beta"] >= 900 {
		t.Fatalf("kept %v in %d bytes: want acme's 100 and beta's within %d bytes", got, bytes, maxSiteCacheBytes)
	}
}

// TestPlanSiteCacheCapacity: beta pre-warms more than the site's cache holds; the plan
// leaves out beta's last images until the images fit the capacity the site reports (a
// digest two tenants list counted once), so acme's image keeps its room. Alone at a
// site, beta keeps all that fits; a site that reports no capacity is planned whole.
func TestPlanSiteCacheCapacity(t *testing.T) {
	st := openCatalog(t)
	acmeKey := newSigner(t, st, "acme", "acme-1", openssl.P256)
	betaKey := newSigner(t, st, "beta", "beta-1", openssl.P256)
	const gib = 1 << 30
	image := func(ref, d string) RegisterRequest {
		req := osRequest(ref)
		req.SHA256, req.SizeBytes = digest(d), new(int64(gib))
		return req
	}
	mustRegister(t, st, "acme", sign(t, image("model@1", "a"), acmeKey, "acme-1", formP1363))
	// beta's own image of acme's digest: the cache holds the one copy.
	mustRegister(t, st, "beta", sign(t, image("same@1", "a"), betaKey, "beta-1", formP1363))
	var betaRefs []string
	for _, d := range []string{"1", "2", "3", "4"} {
		mustRegister(t, st, "beta", sign(t, image("big-"+d+"@1", d), betaKey, "beta-1", formP1363))
		betaRefs = append(betaRefs, "big-"+d+"@1")
	}
	sitesWithPools(t, st, []string{"rack-1", "rack-2"}, []store.Pool{
		{Tenant: "acme", Name: "gpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: []string{"model@1"}}},
		{Tenant: "beta", Name: "gpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: append([]string{"same@1"}, betaRefs...)}},
		{Tenant: "beta", Name: "far", Site: "rack-2", Policy: store.PoolPolicy{PrewarmImages: betaRefs}},
	})
	plan := func(site string) (refs, left []string) {
		t.Helper()
		p := sitePlan(t, st, site)
		for _, img := range p.CacheImages {
			refs = append(refs, img.Ref)
		}
		for _, e := range p.Excluded {
			if e.Reason != proto.ReasonSiteShare {
				t.Fatalf("%s: left out %+v: want reason site-share", site, e)
			}
			left = append(left, e.Tenant+"/"+e.Ref)
		}
		return refs, left
	}
	report := func(site string, capacity int64) { t.Helper(); reportCapacity(t, st, site, capacity) }

	// No capacity reported: planned as before.
	if refs, left := plan("rack-1"); len(refs) != 6 || len(left) != 0 {
		t.Fatalf("rack-1 with no capacity reported: planned %v, left out %v: want all 6", refs, left)
	}
	report("rack-1", 3*gib)
	refs, left := plan("rack-1")
	if diff := cmp.Diff([]string{"big-1@1", "big-2@1", "model@1", "same@1"}, refs); diff != "" {
		t.Errorf("rack-1 within 3 GiB: planned (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"beta/big-4@1", "beta/big-3@1"}, left); diff != "" {
		t.Errorf("rack-1 within 3 GiB: left out (-want +got):\n%s", diff)
	}

	// Alone at rack-2, beta keeps what fits.
	report("rack-2", 3*gib)
	refs, left = plan("rack-2")
	if diff := cmp.Diff([]string{"big-1@1", "big-2@1", "big-3@1"}, refs); diff != "" {
		t.Errorf("rack-2, beta alone within 3 GiB: planned (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"beta/big-4@1"}, left); diff != "" {
		t.Errorf("rack-2, beta alone within 3 GiB: left out (-want +got):\n%s", diff)
	}
	report("rack-2", 4*gib)
	if refs, left := plan("rack-2"); len(refs) != 4 || len(left) != 0 {
		t.Errorf("rack-2 within 4 GiB: planned %v, left out %v: want all 4", refs, left)
	}
}

// TestASizeDeclaredForAnotherTenantsDigestCountsAgainstItsTenant: acme registers its own
// image of beta's digest declaring it far larger than beta's, and pre-warms it at the
// site beta pre-warms two images of 1 GiB at, within its share of the 4 GiB cache. The
// digest counts at its largest declared size while acme lists it, so acme's image is
// the one left out, and beta keeps both; before, the digest counted at the size of the
// tenant first in order, acme's, and left the total when beta's went: every tenant's
// images were trimmed and the plan panicked, index out of range [-1].
func TestASizeDeclaredForAnotherTenantsDigestCountsAgainstItsTenant(t *testing.T) {
	st, register := acmeAndBeta(t)
	const gib = 1 << 30
	register("beta", "model@1", "b", gib)
	register("beta", "data@1", "c", gib)
	register("acme", "copy@1", "b", proto.MaxImageBytes)
	sitesWithPools(t, st, []string{"rack-1"}, []store.Pool{
		{Tenant: "acme", Name: "gpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: []string{"copy@1"}}},
		{Tenant: "beta", Name: "gpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: []string{"model@1", "data@1"}}},
	})
	reportCapacity(t, st, "rack-1", 4*gib)
	p := sitePlan(t, st, "rack-1")
	var refs []string
	for _, img := range p.CacheImages {
		refs = append(refs, img.Ref)
	}
	if diff := cmp.Diff([]string{"data@1", "model@1"}, refs); diff != "" {
		t.Errorf("planned (-want +got):\n%s", diff)
	}
	if len(p.Excluded) != 1 || p.Excluded[0].Tenant != "acme" || p.Excluded[0].Ref != "copy@1" || p.Excluded[0].Reason != proto.ReasonSiteShare {
		t.Errorf("left out %+v: want acme's copy@1 alone, site-share", p.Excluded)
	}
}

// TestASizeUnderstatedForAnotherTenantsDigestLeavesThePlanAsItIs: acme registers its
// own image of beta's 1 GiB digest declaring 1 byte, and pre-warms it where beta
// pre-warms that digest, another 1 GiB image and one of unknown size in a 2 GiB cache.
// The digest counts at 1 GiB, so the cache has no room for the image of unknown size,
// in every plan; before, the room left for it was counted at the size of whichever
// tenant's image of the digest a map's order read last, and the plan, and with it the
// site agent's NodeSpec, changed from one computation to the next.
func TestASizeUnderstatedForAnotherTenantsDigestLeavesThePlanAsItIs(t *testing.T) {
	st, register := acmeAndBeta(t)
	const gib = 1 << 30
	register("beta", "model@1", "b", gib)
	register("beta", "data@1", "c", gib)
	register("beta", "unsized@1", "d", 0)
	register("acme", "copy@1", "b", 1)
	sitesWithPools(t, st, []string{"rack-1"}, []store.Pool{
		{Tenant: "acme", Name: "gpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: []string{"copy@1"}}},
		{Tenant: "beta", Name: "gpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: []string{"model@1", "data@1", "unsized@1"}}},
	})
	reportCapacity(t, st, "rack-1", 2*gib)
	for range 20 {
		p := sitePlan(t, st, "rack-1")
		var refs []string
		for _, img := range p.CacheImages {
			refs = append(refs, img.Ref)
		}
		if diff := cmp.Diff([]string{"copy@1", "data@1", "model@1"}, refs); diff != "" {
			t.Fatalf("planned (-want +got):\n%s", diff)
		}
		if len(p.Excluded) != 1 || p.Excluded[0].Ref != "unsized@1" {
			t.Fatalf("left out %+v: want unsized@1 alone", p.Excluded)
		}
	}
}

// acmeAndBeta opens a catalog with a signer each of tenants acme and beta (acme-1,
// beta-1), and returns it with register, which registers a tenant's OS image ref of the
// artifact d (digest) signed by its signer, declaring size bytes (0: no size).
func acmeAndBeta(t *testing.T) (*store.Store, func(tenant, ref, d string, size int64)) {
	st := openCatalog(t)
	keys := map[string]*openssl.Key{
		"acme": newSigner(t, st, "acme", "acme-1", openssl.P256),
		"beta": newSigner(t, st, "beta", "beta-1", openssl.P256),
	}
	return st, func(tenant, ref, d string, size int64) {
		t.Helper()
		req := osRequest(ref)
		req.SHA256, req.SizeBytes = digest(d), nil
		if size > 0 {
			req.SizeBytes = new(size)
		}
		mustRegister(t, st, tenant, sign(t, req, keys[tenant], tenant+"-1", formP1363))
	}
}

// sitesWithPools creates sites whose image sources are images.example.com, and pools.
func sitesWithPools(t *testing.T, st *store.Store, sites []string, pools []store.Pool) {
	t.Helper()
	storetest.Update(t, st, func(tx *store.Tx) error {
		for _, s := range sites {
			if _, err := tx.CreateSite(s); err != nil {
				return err
			}
			if _, err := tx.SetSiteImageSources(s, []string{"images.example.com"}); err != nil {
				return err
			}
		}
		for _, p := range pools {
			if _, err := tx.CreatePool(p); err != nil {
				return err
			}
		}
		return nil
	})
}

// reportCapacity records the site section of site's agent reporting its cache's capacity.
func reportCapacity(t *testing.T, st *store.Store, site string, capacity int64) {
	t.Helper()
	data, _ := json.Marshal(proto.SiteInventory{HTTPBase: "http://10.0.0.1", CacheCapacityBytes: capacity})
	storetest.Update(t, st, func(tx *store.Tx) error { _, err := tx.PutInventory(site, proto.SectionSite, data); return err })
}

// sitePlan is site's cache plan with the signer allowlists.
func sitePlan(t *testing.T, st *store.Store, site string) CachePlan {
	t.Helper()
	var p CachePlan
	if err := st.View(func(tx *store.Tx) (err error) { p, err = PlanSiteCache(tx, site, Allowlist{}); return err }); err != nil {
		t.Fatal(err)
	}
	return p
}
