package image

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit/openssl"
	"github.com/google/go-cmp/cmp"
)

func TestPlanSiteCache(t *testing.T) {
	st := openCatalog(t)
	platform := openssl.Generate(t, openssl.Ed25519)
	acmeKey := openssl.Generate(t, openssl.P256)
	gone := openssl.Generate(t, openssl.Ed25519)
	addSigner(t, st, store.RootTenant, "platform", platform)
	addSigner(t, st, "acme", "acme-1", acmeKey)
	addSigner(t, st, "acme", "acme-gone", gone)

	withDigest := func(req RegisterRequest, d string) RegisterRequest { req.SHA256 = digest(d); return req }
	base := mustRegister(t, st, store.RootTenant, sign(t, withDigest(osRequest("base@1"), "1"), platform, "platform", formEd25519))
	mustUpdate(t, st, func(tx *store.Tx) error { _, err := Promote(tx, store.RootTenant, base.ID); return err })
	own := mustRegister(t, st, "acme", sign(t, withDigest(osRequest("own@1"), "2"), acmeKey, "acme-1", formP1363))
	mustRegister(t, st, "acme", withDigest(osRequest("unsigned@1"), "3"))
	mustRegister(t, st, "acme", sign(t, withDigest(osRequest("revoked@1"), "4"), gone, "acme-gone", formEd25519))
	revokeSigner(t, st, "acme", "acme-gone")
	// beta's own (unsigned) base@1 shadows the platform's in beta's pools.
	mustRegister(t, st, "beta", withDigest(osRequest("base@1"), "5"))

	mustUpdate(t, st, func(tx *store.Tx) error {
		for _, s := range []string{"rack-1", "rack-2"} {
			if _, err := tx.CreateSite(s); err != nil {
				return err
			}
		}
		for _, p := range []store.Pool{
			{Tenant: "acme", Name: "gpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: []string{"own@1", "unsigned@1", "missing@1", "base@1", "revoked@1"}}},
			{Tenant: "acme", Name: "cpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: []string{"own@1"}}},
			{Tenant: "beta", Name: "gpu", Site: "rack-1", Policy: store.PoolPolicy{PrewarmImages: []string{"own@1", "base@1"}}},
			{Tenant: "acme", Name: "far", Site: "rack-2", Policy: store.PoolPolicy{PrewarmImages: []string{"unsigned@1"}}},
		} {
			if _, err := tx.CreatePool(p); err != nil {
				return err
			}
		}
		return nil
	})

	var plan CachePlan
	if err := st.View(func(tx *store.Tx) (err error) { plan, err = PlanSiteCache(tx, "rack-1", Allowlist{}); return err }); err != nil {
		t.Fatal(err)
	}
	want := []proto.CacheImage{
		{Ref: "base@1", Digest: digest("1"), Source: base.Source, SizeBytes: base.SizeBytes, Format: proto.FormatRaw, Compression: proto.CompressionZstd},
		{Ref: "own@1", Digest: digest("2"), Source: own.Source, SizeBytes: own.SizeBytes, Format: proto.FormatRaw, Compression: proto.CompressionZstd},
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
