package image

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/share"
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
	// sources), "not-ramdisk" (a ramdisk extra whose image is of another kind), or
	// "site-share" (the site's plan was over its bounds, or its images over the site
	// cache's capacity, and the pool's tenant lists the most there).
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// A site's cache plan, which the site agent's NodeSpec carries beside the MACs of every
// tenant's machines at the site, holds at most maxSiteCacheImages images taking at most
// maxSiteCacheBytes of JSON. Pools of any tenant may be at any site, so without a bound
// one tenant's pre-warm lists could grow the site's NodeSpec past what an agent frame
// carries (proto.MaxFrame) and its cache report past what the registry takes: no tenant's
// cache image would then reach the site. Over either bound, the tenant that lists the most
// loses its last entry, until the plan fits (trimToShare). Likewise the plan's images
// fit the site cache's capacity, which the site reports: pre-warmed images are never
// evicted for one another, so one tenant's pre-warm as large as the cache would
// otherwise leave no room for another's.
const (
	maxSiteCacheImages = 1024
	maxSiteCacheBytes  = 1 << 20
)

// PlanSiteCache resolves every pool's policy.prewarmImages and policy.ramdiskExtras at
// a site as the pool's tenant (ResolveImage) and keeps the images that pass
// VerifyImageForUse for that tenant with v (a ramdisk extra: VerifyRamdiskExtra) and
// whose source host the site's image sources allow (and the pool's, when it narrows
// them), within the site's bounds and its cache's capacity (trimToShare). A site with no image sources
// pre-warms nothing.
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
	lists := map[string]*tenantPlan{} // tenant -> what its pools list
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
			l := lists[p.Tenant]
			if l == nil {
				l = &tenantPlan{listed: map[[2]string]bool{}}
				lists[p.Tenant] = l
			}
			size, err := plannedSize(tx, site, img)
			if err != nil {
				return plan, err
			}
			l.add(planned{pool: p.Name, ref: ref, extra: i >= extra, size: size, image: proto.CacheImage{
				Ref: img.Ref, Digest: img.SHA256, Source: img.Source, SizeBytes: img.SizeBytes,
				Format: img.Format, Compression: img.Compression,
			}})
		}
	}
	// The site agent's node id is the site's name (site.Agent).
	si, err := tx.SiteInventory(site)
	if err != nil {
		return plan, err
	}
	plan.Excluded = append(plan.Excluded, trimToShare(site, lists, si.CacheCapacityBytes)...)
	listed := map[[2]string]bool{} // digest, source
	for _, tenant := range slices.Sorted(maps.Keys(lists)) {
		for _, e := range lists[tenant].entries {
			if !listed[[2]string{e.image.Digest, e.image.Source}] {
				listed[[2]string{e.image.Digest, e.image.Source}] = true
				plan.CacheImages = append(plan.CacheImages, e.image)
			}
		}
	}
	slices.SortFunc(plan.CacheImages, func(a, b proto.CacheImage) int {
		return cmp.Or(cmp.Compare(a.Ref, b.Ref), cmp.Compare(a.Digest, b.Digest), cmp.Compare(a.Source, b.Source))
	})
	return plan, nil
}

// planned is one entry a tenant's pools list for a site's cache.
type planned struct {
	pool, ref string
	extra     bool // a ramdisk extra, which the pool's boots need: trimmed last
	image     proto.CacheImage
	bytes     int
	size      int64 // the artifact's size as planned (plannedSize); 0: unknown
}

// plannedSize is the size an image is planned at for a site's cache: its catalog size,
// else the size the site's cache reported for it once it held it ready (what it learned
// pulling an image registered without sizeBytes), else 0: unknown. The location is img's
// own, which syncSite records only where the site verified img's source for its digest:
// another tenant's image of the digest from another source lends it no size.
func plannedSize(tx *store.Tx, site string, img store.Image) (int64, error) {
	if img.SizeBytes > 0 {
		return img.SizeBytes, nil
	}
	loc, err := tx.ImageLocation(site, img.ID)
	switch {
	case proto.CodeOf(err) == proto.NotFound:
		return 0, nil
	case err != nil:
		return 0, err
	case loc.State == proto.CacheReady:
		return loc.SizeBytes, nil
	}
	return 0, nil
}

// tenantPlan is what one tenant's pools at a site list, each digest and source once:
// its ramdisk extras first, then its pre-warm images of known size, then those of
// unknown size (trimmed first), each in its pools' order.
type tenantPlan struct {
	entries []planned
	listed  map[[2]string]bool // digest, source
}

func (l *tenantPlan) add(e planned) {
	if l.listed[[2]string{e.image.Digest, e.image.Source}] {
		return
	}
	l.listed[[2]string{e.image.Digest, e.image.Source}] = true
	b, _ := proto.Marshal(e.image)
	e.bytes = len(b)
	at := -1
	switch {
	case e.extra:
		at = slices.IndexFunc(l.entries, func(x planned) bool { return !x.extra })
	case e.size > 0:
		at = slices.IndexFunc(l.entries, func(x planned) bool { return !x.extra && x.size == 0 })
	}
	if at < 0 {
		at = len(l.entries)
	}
	l.entries = slices.Insert(l.entries, at, e)
}

// trimToShare brings a site's cache plan within maxSiteCacheImages and
// maxSiteCacheBytes (counting an entry two tenants list for each) and, when the site
// reports one, within its cache's capacity (the images' planned sizes, a digest counted
// once), by the site's share rule (share.Trim): the tenant listing the most by the bound
// that is over loses its last entry. An image of unknown size counts for nothing there,
// and is kept only while the images of known size leave the cache some room
// (fitUnknown). It returns what it dropped.
func trimToShare(site string, lists map[string]*tenantPlan, capacity int64) []ExcludedImage {
	entries := func(tenant string) string {
		return fmt.Sprintf("site %s's cache plan holds at most %d images in %d bytes; tenant %s lists the most there: list fewer pre-warm images at this site", site, maxSiteCacheImages, maxSiteCacheBytes, tenant)
	}
	bounds := []share.Bound[planned]{
		{Max: maxSiteCacheImages, Measure: func(planned) int64 { return 1 }},
		{Max: maxSiteCacheBytes, Measure: func(e planned) int64 { return int64(e.bytes) }},
	}
	messages := []func(string) string{entries, entries}
	if capacity > 0 {
		bounds = append(bounds, share.Bound[planned]{Max: capacity, Measure: func(e planned) int64 { return e.size },
			Once: func(e planned) string { return e.image.Digest }})
		messages = append(messages, func(tenant string) string {
			return fmt.Sprintf("site %s's cache holds %d bytes, less than the images planned there; tenant %s's take the most: pre-warm fewer or smaller images at this site", site, capacity, tenant)
		})
	}
	byTenant := map[string][]planned{}
	for tenant, l := range lists {
		byTenant[tenant] = l.entries
	}
	var out []ExcludedImage
	for _, d := range share.Trim(byTenant, bounds) {
		out = append(out, ExcludedImage{Tenant: d.Tenant, Pool: d.Entry.pool, Ref: d.Entry.ref, Reason: proto.ReasonSiteShare, Message: messages[d.Bound](d.Tenant)})
	}
	for tenant, kept := range byTenant {
		lists[tenant].entries = kept
	}
	return append(out, fitUnknown(site, lists, capacity)...)
}

// fitUnknown drops the images of unknown size from a site's plan when the images of
// known size (a digest counted once, at the largest size planned for it) leave its cache, of capacity bytes, no room: the
// cache pulls an image of unknown size into the room no other image holds, and never
// evicts a planned image for it. A site that reports no capacity keeps them all.
func fitUnknown(site string, lists map[string]*tenantPlan, capacity int64) []ExcludedImage {
	if capacity <= 0 {
		return nil
	}
	sized := map[string]int64{} // digest -> the largest size planned for it, as trimToShare counts it
	for _, l := range lists {
		for _, e := range l.entries {
			sized[e.image.Digest] = max(sized[e.image.Digest], e.size)
		}
	}
	var total int64
	for _, n := range sized {
		total += n
	}
	if total < capacity {
		return nil
	}
	var out []ExcludedImage
	for _, tenant := range slices.Sorted(maps.Keys(lists)) {
		l := lists[tenant]
		l.entries = slices.DeleteFunc(l.entries, func(e planned) bool {
			if e.size > 0 {
				return false
			}
			out = append(out, ExcludedImage{Tenant: tenant, Pool: e.pool, Ref: e.ref, Reason: proto.ReasonSiteShare,
				Message: fmt.Sprintf("site %s's cache holds %d bytes, all of them planned for images of known size, and %s's size is unknown: register it with sizeBytes, or pre-warm fewer images at this site", site, capacity, e.ref)})
			return true
		})
	}
	return out
}

// SiteCacheImages is the site.cacheImages list of a site's agents: the verified images
// its pools pre-warm.
func SiteCacheImages(tx *store.Tx, site string, v Verifier) ([]proto.CacheImage, error) {
	plan, err := PlanSiteCache(tx, site, v)
	return plan.CacheImages, err
}

// sourceAllowed refuses, as INVALID_STATE with the reason source-not-allowed, an image
// whose source the site's image sources, or the pool's when it has some, do not allow
// (SourceRefused): the site's caches never fetch it.
func sourceAllowed(site store.Site, p store.Pool, img store.Image) error {
	refused, byPool := SourceRefused(site, p, img.Source)
	if !refused {
		return nil
	}
	host, port, _ := proto.SourceHost(img.Source)
	if byPool {
		return proto.Errorf(proto.InvalidState, "its source host %s:%s is not among pool %s's policy.imageSources %v", host, port, p.Name, p.Policy.ImageSources).WithReason(proto.ReasonSourceNotAllowed)
	}
	return proto.Errorf(proto.InvalidState, "its source host %s:%s is not among site %s's image sources %v: the platform adds it with `sites update %s --image-sources`", host, port, site.ID, site.ImageSources, site.ID).WithReason(proto.ReasonSourceNotAllowed)
}
