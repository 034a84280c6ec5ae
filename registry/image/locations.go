package image

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// maxCacheEntries bounds one agent's cache report.
const maxCacheEntries = 4096

// RecordSiteCacheReport keeps the `images` inventory section a site agent reported
// and, when it differs from the agent's last report, brings the site's image locations
// in line with every agent's last report, in the same transaction. It reports whether
// the report changed. A malformed report is INVALID_INPUT naming the bad entry. A cut
// report (the agent left entries out so that it fits its frame, proto.SiteInventory's
// omitted) names only part of what the cache holds: the entries of the agent's last
// report whose digest it does not name are kept as they were, not taken for gone.
func RecordSiteCacheReport(tx *store.Tx, site, agent string, entries []proto.ImageCacheEntry, cut bool) (bool, error) {
	if proto.CheckNodeID(agent) != nil {
		return false, proto.Errorf(proto.InvalidInput, "agent id %q is not one the registry issues", agent).WithPath("agentId")
	}
	if err := checkEntries(entries); err != nil {
		return false, err
	}
	if cut {
		var err error
		if entries, err = withUnreported(tx, site, agent, entries); err != nil {
			return false, err
		}
	}
	changed, err := tx.PutSiteCacheReport(store.SiteCacheReport{Site: site, AgentID: agent, Images: entries})
	if err != nil || !changed {
		return changed, err
	}
	return true, syncSite(tx, site)
}

// withUnreported is a cut report's entries and, up to maxCacheEntries, those of the
// agent's last report whose digest it does not name.
func withUnreported(tx *store.Tx, site, agent string, entries []proto.ImageCacheEntry) ([]proto.ImageCacheEntry, error) {
	reports, err := tx.SiteCacheReports(site)
	if err != nil {
		return nil, err
	}
	named := map[string]bool{}
	for _, e := range entries {
		named[e.Digest] = true
	}
	out := slices.Clone(entries)
	for _, r := range reports {
		if r.AgentID != agent {
			continue
		}
		for _, e := range r.Images {
			if len(out) < maxCacheEntries && !named[e.Digest] {
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// DropSiteAgent forgets the cache of an agent that left the site, and brings the
// site's image locations in line with the agents that remain.
func DropSiteAgent(tx *store.Tx, site, agent string) error {
	dropped, err := tx.DeleteSiteCacheReport(site, agent)
	if err != nil || !dropped {
		return err
	}
	return syncSite(tx, site)
}

func checkEntries(entries []proto.ImageCacheEntry) error {
	if len(entries) > maxCacheEntries {
		return proto.Errorf(proto.InvalidInput, "a cache report holds at most %d images", maxCacheEntries).WithPath("images")
	}
	seen := map[string]bool{}
	for i, e := range entries {
		path := "images[" + strconv.Itoa(i) + "]"
		switch {
		case !proto.IsDigest(e.Digest):
			return proto.Errorf(proto.InvalidInput, "digest must be 64 lower-case hex digits").WithPath(path + ".digest")
		case seen[e.Digest]:
			return proto.Errorf(proto.InvalidInput, "digest %s is reported twice", e.Digest).WithPath(path + ".digest")
		case !slices.Contains(proto.ImageCacheStates, e.State):
			return proto.Errorf(proto.InvalidInput, "state %q: use one of %v", e.State, proto.ImageCacheStates).WithPath(path + ".state")
		case e.SizeBytes < 0:
			return proto.Errorf(proto.InvalidInput, "sizeBytes cannot be negative").WithPath(path + ".sizeBytes")
		case len(e.Sources) > proto.MaxImageCacheSources:
			return proto.Errorf(proto.InvalidInput, "an image lists at most %d sources", proto.MaxImageCacheSources).WithPath(path + ".sources")
		}
		seen[e.Digest] = true
	}
	return nil
}

// syncSite derives the site's image locations from its agents' last reports: a catalog
// image is at the site when an agent holds its digest for its source (the entry's
// sources name it: the cache saw that source serve those bytes), in the best state any
// such agent has it in (proto.CacheStateRank); a location no agent holds any more is dropped. An image whose
// source no entry names is not at the site, whoever else's image of the digest is: a
// digest is no secret, a source's bytes are the entitlement.
func syncSite(tx *store.Tx, site string) error {
	reports, err := tx.SiteCacheReports(site)
	if err != nil {
		return err
	}
	catalog := map[string][]store.Image{}      // digest -> its catalog images
	held := map[string]proto.ImageCacheEntry{} // image id -> its best entry
	for _, r := range reports {
		for _, e := range r.Images {
			imgs, ok := catalog[e.Digest]
			if !ok {
				if imgs, err = tx.ImagesByDigest(e.Digest); err != nil {
					return err
				}
				catalog[e.Digest] = imgs
			}
			for _, img := range imgs {
				if !slices.Contains(e.Sources, img.Source) {
					continue
				}
				h, ok := held[img.ID]
				if !ok || proto.CacheStateRank(e.State) < proto.CacheStateRank(h.State) {
					h.State = e.State
				}
				h.SizeBytes = max(h.SizeBytes, e.SizeBytes)
				if e.LastUsed.After(h.LastUsed) {
					h.LastUsed = e.LastUsed
				}
				held[img.ID] = h
			}
		}
	}
	at := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(held)) {
		h := held[id]
		if _, err := RecordImageLocation(tx, site, id, h.State, h.SizeBytes, h.LastUsed); err != nil {
			return err
		}
		at[id] = true
	}
	locs, err := tx.ImageLocations(site)
	if err != nil {
		return err
	}
	for _, loc := range locs {
		if !at[loc.ImageID] {
			if err := tx.DeleteImageLocation(site, loc.ImageID); err != nil {
				return err
			}
		}
	}
	return nil
}

// RecordImageLocation records that a site's cache holds an image in state, keeping the
// location's latest use.
func RecordImageLocation(tx *store.Tx, site, imageID string, state proto.ImageCacheState, sizeBytes int64, lastUsed time.Time) (store.ImageLocation, error) {
	loc, err := tx.ImageLocation(site, imageID)
	if err != nil && proto.CodeOf(err) != proto.NotFound {
		return loc, err
	}
	loc.Site, loc.ImageID, loc.State, loc.SizeBytes = site, imageID, state, sizeBytes
	if lastUsed.After(loc.LastUsed) {
		loc.LastUsed = lastUsed
	}
	return tx.PutImageLocation(loc)
}

// ImagesCachedAt returns the locations of the images ready at a site.
func ImagesCachedAt(tx *store.Tx, site string) ([]store.ImageLocation, error) {
	locs, err := tx.ImageLocations(site)
	return slices.DeleteFunc(locs, func(l store.ImageLocation) bool { return l.State != proto.CacheReady }), err
}
