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
// the report changed. A malformed report is INVALID_INPUT naming the bad entry.
func RecordSiteCacheReport(tx *store.Tx, site, agent string, entries []proto.ImageCacheEntry) (bool, error) {
	if proto.CheckNodeID(agent) != nil {
		return false, proto.Errorf(proto.InvalidInput, "agent id %q is not one the registry issues", agent).WithPath("agentId")
	}
	if err := checkEntries(entries); err != nil {
		return false, err
	}
	changed, err := tx.PutSiteCacheReport(store.SiteCacheReport{Site: site, AgentID: agent, Images: entries})
	if err != nil || !changed {
		return changed, err
	}
	return true, syncSite(tx, site)
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
		}
		seen[e.Digest] = true
	}
	return nil
}

// stateRank orders the states an artifact has across a site's agents: the site has it
// ready if any agent has it ready, else pulling, else evicting, else failed.
var stateRank = map[proto.ImageCacheState]int{proto.CacheReady: 0, proto.CachePulling: 1, proto.CacheEvicting: 2, proto.CacheFailed: 3}

// syncSite derives the site's image locations from its agents' last reports: every
// catalog image whose digest an agent holds is at the site in the best state any agent
// has it in; a location no agent holds any more is dropped.
func syncSite(tx *store.Tx, site string) error {
	reports, err := tx.SiteCacheReports(site)
	if err != nil {
		return err
	}
	held := map[string]proto.ImageCacheEntry{}
	for _, r := range reports {
		for _, e := range r.Images {
			h, ok := held[e.Digest]
			if !ok || stateRank[e.State] < stateRank[h.State] {
				h.State = e.State
			}
			h.Digest, h.SizeBytes = e.Digest, max(h.SizeBytes, e.SizeBytes)
			if e.LastUsed.After(h.LastUsed) {
				h.LastUsed = e.LastUsed
			}
			held[e.Digest] = h
		}
	}
	at := map[string]bool{}
	for _, digest := range slices.Sorted(maps.Keys(held)) {
		imgs, err := tx.ImagesByDigest(digest)
		if err != nil {
			return err
		}
		for _, img := range imgs {
			h := held[digest]
			if _, err := RecordImageLocation(tx, site, img.ID, h.State, h.SizeBytes, h.LastUsed); err != nil {
				return err
			}
			at[img.ID] = true
		}
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
