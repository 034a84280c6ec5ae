package image

import (
	"cmp"
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// CachePlan is what a site's cache should hold, and which pre-warm refs were left out.
type CachePlan struct {
	Site string `json:"siteId"`
	// CacheImages are the site agents' NodeSpec site.cacheImages: each verified image a
	// pool of the site pre-warms, once per digest and source, ordered by ref. Images of
	// one digest from several sources are listed once each: the cache serves its copy for
	// an image only once that image's own source served it the bytes.
	CacheImages []proto.CacheImage `json:"cacheImages"`
	// Excluded are the pre-warm refs left out, with why.
	Excluded []ExcludedImage `json:"excluded"`
}

// ExcludedImage is a pool's pre-warm ref that is not in the site's cache plan.
type ExcludedImage struct {
	Tenant string `json:"tenantId"`
	Pool   string `json:"pool"`
	Ref    string `json:"ref"`
	// Reason is "not-found" (the ref resolves to no image the pool's tenant sees), the
	// reason VerifyImageForUse gave ("unsigned", "signature" or "untrusted-signer"),
	// "source-not-allowed" (its source host is outside the site's or the pool's image
	// sources), or "not-ramdisk" (a ramdisk extra whose image is of another kind).
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// PlanSiteCache resolves every pool's policy.prewarmImages and policy.ramdiskExtras at
// a site as the pool's tenant (ResolveImage) and keeps the images that pass
// VerifyImageForUse for that tenant with v (a ramdisk extra: VerifyRamdiskExtra) and
// whose source host the site's image sources allow (and the pool's, when it narrows
// them). A site with no image sources pre-warms nothing.
func PlanSiteCache(tx *store.Tx, site string, v Verifier) (CachePlan, error) {
	plan := CachePlan{Site: site, CacheImages: []proto.CacheImage{}, Excluded: []ExcludedImage{}}
	st, err := tx.Site(site)
	if err != nil {
		return plan, err
	}
	pools, err := tx.PoolsAtSite(site)
	if err != nil {
		return plan, err
	}
	listed := map[[2]string]bool{} // digest, source
	for _, p := range pools {
		extra := len(p.Policy.PrewarmImages)
		for i, ref := range append(slices.Clone(p.Policy.PrewarmImages), p.Policy.RamdiskExtras...) {
			img, err := ResolveImage(tx, p.Tenant, ref)
			switch {
			case err != nil:
			case i >= extra:
				err = VerifyRamdiskExtra(tx, p.Tenant, img, v)
			default:
				err = VerifyImageForUse(tx, p.Tenant, img, UseOptions{Verifier: v})
			}
			if err == nil {
				err = sourceAllowed(st, p, img)
			}
			switch code := proto.CodeOf(err); {
			case err == nil:
			case code == proto.NotFound || code == proto.InvalidState:
				e := proto.AsError(err)
				reason := e.Details.Reason
				if reason == "" {
					reason = "not-found"
				}
				plan.Excluded = append(plan.Excluded, ExcludedImage{Tenant: p.Tenant, Pool: p.Name, Ref: ref, Reason: reason, Message: e.Message})
				continue
			default:
				return plan, err
			}
			if listed[[2]string{img.SHA256, img.Source}] {
				continue
			}
			listed[[2]string{img.SHA256, img.Source}] = true
			plan.CacheImages = append(plan.CacheImages, proto.CacheImage{
				Ref: img.Ref, Digest: img.SHA256, Source: img.Source, SizeBytes: img.SizeBytes,
				Format: img.Format, Compression: img.Compression,
			})
		}
	}
	slices.SortFunc(plan.CacheImages, func(a, b proto.CacheImage) int {
		return cmp.Or(cmp.Compare(a.Ref, b.Ref), cmp.Compare(a.Digest, b.Digest), cmp.Compare(a.Source, b.Source))
	})
	return plan, nil
}

// SiteCacheImages is the site.cacheImages list of a site's agents: the verified images
// its pools pre-warm.
func SiteCacheImages(tx *store.Tx, site string, v Verifier) ([]proto.CacheImage, error) {
	plan, err := PlanSiteCache(tx, site, v)
	return plan.CacheImages, err
}

// sourceAllowed refuses, as INVALID_STATE with the reason source-not-allowed, an image
// whose source the site's image sources, or the pool's when it has some, do not allow:
// the site's caches never fetch it.
func sourceAllowed(site store.Site, p store.Pool, img store.Image) error {
	host, port, _ := proto.SourceHost(img.Source)
	switch {
	case !proto.ImageSourceAllowed(site.ImageSources, img.Source):
		return proto.Errorf(proto.InvalidState, "its source host %s:%s is not among site %s's image sources %v: the platform adds it with `sites update %s --image-sources`", host, port, site.ID, site.ImageSources, site.ID).WithReason(proto.ReasonSourceNotAllowed)
	case len(p.Policy.ImageSources) > 0 && !proto.ImageSourceAllowed(p.Policy.ImageSources, img.Source):
		return proto.Errorf(proto.InvalidState, "its source host %s:%s is not among pool %s's policy.imageSources %v", host, port, p.Name, p.Policy.ImageSources).WithReason(proto.ReasonSourceNotAllowed)
	}
	return nil
}
