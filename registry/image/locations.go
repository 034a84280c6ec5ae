package image

import (
	"cmp"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// maxCacheEntries bounds one agent's cache report.
const maxCacheEntries = 4096

// maxReportBytes bounds the JSON of the entries the store keeps of one agent's cache
// report: a frame, what the agent can send in one report, and what a stored report's
// entries decompress to at most. A cut report keeps the entries of the agent's last
// report that it does not name only while they fit it and their stored form fits
// store.MaxCacheReportData, so that reports one after another, each with new digests,
// do not add up in one record (an entry takes up to 16 sources of 2 KB) and no record
// passes what one etcd transaction takes.
const maxReportBytes = proto.MaxFrame

// RecordSiteCacheReport keeps the `images` inventory section a site agent reported
// and, when it differs from the agent's last report, brings the site's image locations
// in line with every agent's last report, in the same transaction. It reports whether
// the report changed. A malformed report is INVALID_INPUT naming the bad entry. A cut
// report (the agent left entries out so that it fits its frame, proto.SiteInventory's
// omitted) names only part of what the cache holds: the entries of the agent's last
// report whose digest it does not name are kept as they were, not taken for gone,
// while they fit the bounds above.
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

// withUnreported is a cut report's entries and, up to maxCacheEntries and while their
// JSON fits maxReportBytes and their stored form store.MaxCacheReportData (storedWithin),
// those of the agent's last report whose digest it does not name. The report's own
// entries are always kept: their section's stored form was within what the store takes.
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
	size, err := jsonSize(entries)
	if err != nil {
		return nil, err
	}
	for _, r := range reports {
		if r.AgentID != agent {
			continue
		}
		for _, e := range r.Images {
			if len(out) >= maxCacheEntries || named[e.Digest] {
				continue
			}
			n, err := jsonSize(e)
			if err != nil {
				return nil, err
			}
			if size+n+1 > maxReportBytes { // and its comma
				continue
			}
			out, size = append(out, e), size+n+1
		}
	}
	return storedWithin(out, len(entries))
}

// storedWithin is the longest run of list, its first reported entries always kept, whose
// stored form (store.CacheReportSize) fits store.MaxCacheReportData. Entries as good as
// random do not compress, and a frame of them stored as it is took more than one etcd
// transaction: the report was never recorded. The stored size grows with the entries
// kept, so the count is bisected: a dozen packings at most, once per change of a cut
// report.
func storedWithin(list []proto.ImageCacheEntry, reported int) ([]proto.ImageCacheEntry, error) {
	fits := func(n int) (bool, error) {
		size, err := store.CacheReportSize(list[:n])
		return size <= store.MaxCacheReportData, err
	}
	if len(list) == reported {
		return list, nil
	}
	if ok, err := fits(len(list)); ok || err != nil {
		return list, err
	}
	lo, hi := reported, len(list) // list[:lo] is kept, list[:hi] does not fit
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		ok, err := fits(mid)
		if err != nil {
			return nil, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return list[:lo], nil
}

// jsonSize is the length of v's JSON as the store writes it (proto.Marshal).
func jsonSize(v any) (int, error) {
	b, err := proto.Marshal(v)
	return len(b), err
}

// isHostPort says whether s is a host and a port as a site's cache reports where a fetch
// was refused: at most proto.MaxRefusedHost bytes of printable ASCII without spaces,
// so that no report writes control characters into an operator's terminal, and a
// port number.
func isHostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	n, perr := strconv.Atoi(port)
	return err == nil && perr == nil && n >= 0 && n <= 65535 && host != "" && len(s) <= proto.MaxRefusedHost &&
		!strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r > '~' })
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
		case e.Reason != "" && (e.State != proto.CacheFailed || !slices.Contains(proto.ImageCacheReasons, e.Reason)):
			return proto.Errorf(proto.InvalidInput, "reason %q: a failed image gives one of %v, or none", e.Reason, proto.ImageCacheReasons).WithPath(path + ".reason")
		case e.RefusedHost != "" && (e.Reason != proto.ReasonSourceNotAllowed || !isHostPort(e.RefusedHost)):
			return proto.Errorf(proto.InvalidInput, "refusedHost %q: an image refused for reason %s gives HOST:PORT, at most %d bytes of printable ASCII",
				e.RefusedHost, proto.ReasonSourceNotAllowed, proto.MaxRefusedHost).WithPath(path + ".refusedHost")
		}
		if err := checkRefused(path+".refused", e); err != nil {
			return err
		}
		seen[e.Digest] = true
	}
	return nil
}

// checkRefused checks the sources e reports refused (proto.ImageCacheEntry.Refused), at
// path: at most proto.MaxImageCacheSources, sorted by source and each once, none of the
// entry's sources, each a source of at most maxSource bytes and the HOST:PORT it was
// refused at (isHostPort).
func checkRefused(path string, e proto.ImageCacheEntry) error {
	if len(e.Refused) > proto.MaxImageCacheSources {
		return proto.Errorf(proto.InvalidInput, "an image lists at most %d refused sources", proto.MaxImageCacheSources).WithPath(path)
	}
	for j, r := range e.Refused {
		at := path + "[" + strconv.Itoa(j) + "]"
		switch {
		case r.Source == "" || len(r.Source) > maxSource:
			return proto.Errorf(proto.InvalidInput, "a refused source is a source URL of 1 to %d bytes", maxSource).WithPath(at + ".source")
		case j > 0 && r.Source <= e.Refused[j-1].Source:
			return proto.Errorf(proto.InvalidInput, "refused sources are sorted by source, each once").WithPath(at + ".source")
		case slices.Contains(e.Sources, r.Source):
			return proto.Errorf(proto.InvalidInput, "a source the image lists as served is not refused too").WithPath(at + ".source")
		case !isHostPort(r.RefusedHost):
			return proto.Errorf(proto.InvalidInput, "refusedHost %q: a refused source gives HOST:PORT, at most %d bytes of printable ASCII",
				r.RefusedHost, proto.MaxRefusedHost).WithPath(at + ".refusedHost")
		}
	}
	return nil
}

// syncSite derives the site's locations from its agents' last reports: an artifact is
// at the site for a source when an agent holds its digest for that source (the entry's
// sources name it: the cache saw that source serve those bytes), as heldAt merges the
// agents' entries, and a catalog image of that digest and source is located by it
// (store.Tx.ImageLocation). A source an entry reports refused
// (proto.ImageCacheEntry.Refused) is failed at the site, with reason
// source-not-allowed, unless an agent holds it for that source. An image whose source no
// entry names is not at the site, whoever else's image of the digest is: a digest is no
// secret, a source's bytes are the entitlement. It keeps a location only for a digest
// and source some catalog image has, one for them all, so a report writes at most a
// location for each source an entry names (proto.MaxImageCacheSources, and as many
// refused), whatever number of images, of any tenants, name the digest: it wrote the
// location of every image of it, and past 4,091 one etcd transaction did not take them.
// It writes only the locations that changed (RecordSiteLocation) and drops those no
// agent holds any more.
func syncSite(tx *store.Tx, site string) error {
	reports, err := tx.SiteCacheReports(site)
	if err != nil {
		return err
	}
	held := heldAt(reports)
	digests := map[string]bool{}
	for k := range held {
		digests[k.digest] = true
	}
	locs := map[heldKey]store.SiteLocation{}
	for _, d := range slices.Sorted(maps.Keys(digests)) {
		imgs, err := tx.ImagesByDigest(d)
		if err != nil {
			return err
		}
		for _, img := range imgs {
			k := heldKey{d, img.Source}
			if h, ok := held[k]; ok {
				locs[k] = store.SiteLocation{Site: site, Digest: d, Source: img.Source, State: h.State, SizeBytes: h.SizeBytes, LastUsed: h.LastUsed,
					Reason: h.Reason, RefusedHost: h.RefusedHost}
			}
		}
	}
	stored, err := tx.SiteLocations(site)
	if err != nil {
		return err
	}
	for _, loc := range stored {
		if _, ok := locs[heldKey{loc.Digest, loc.Source}]; !ok {
			if err := tx.DeleteSiteLocation(site, loc.Digest, loc.Source); err != nil {
				return err
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(locs), func(a, b heldKey) int {
		return cmp.Or(strings.Compare(a.digest, b.digest), strings.Compare(a.source, b.source))
	}) {
		if _, err := RecordSiteLocation(tx, locs[k]); err != nil {
			return err
		}
	}
	return nil
}

// heldKey is a digest and a source of it.
type heldKey struct{ digest, source string }

// heldAt merges a site's agents' reports by digest and source (each source an entry
// names): the best state any agent holds the digest in for the source
// (proto.CacheStateRank), with the reason that agent gave for it, the largest size and
// the latest use. A source an entry reports refused counts as failed for it, with
// reason source-not-allowed and the host it was refused at.
func heldAt(reports []store.SiteCacheReport) map[heldKey]proto.ImageCacheEntry {
	held := map[heldKey]proto.ImageCacheEntry{}
	for _, r := range reports {
		for _, e := range r.Images {
			for _, src := range e.Sources {
				k := heldKey{e.Digest, src}
				h, ok := held[k]
				if !ok || proto.CacheStateRank(e.State) < proto.CacheStateRank(h.State) {
					h.State, h.Reason, h.RefusedHost = e.State, e.Reason, e.RefusedHost
				}
				h.SizeBytes = max(h.SizeBytes, e.SizeBytes)
				if e.LastUsed.After(h.LastUsed) {
					h.LastUsed = e.LastUsed
				}
				held[k] = h
			}
			for _, r := range e.Refused {
				k := heldKey{e.Digest, r.Source}
				if h, ok := held[k]; !ok || proto.CacheStateRank(proto.CacheFailed) < proto.CacheStateRank(h.State) {
					held[k] = proto.ImageCacheEntry{State: proto.CacheFailed, Reason: proto.ReasonSourceNotAllowed, RefusedHost: r.RefusedHost,
						SizeBytes: h.SizeBytes, LastUsed: h.LastUsed}
				}
			}
		}
	}
	return held
}

// FailedImage is an image of a site's cache plan that the site's cache failed to pull
// from its source, as the site's agents last reported it.
type FailedImage struct {
	Ref    string
	Digest string
	Source string
	// Reason and RefusedHost are why, when the cache said (proto.ImageCacheEntry's).
	Reason      string
	RefusedHost string
}

// FailedAt lists the images of planned (the site's cache plan, PlanSiteCache's) that
// the site's agents report failed for their source (no agent holding it for that
// source in a better state), in plan order, so that an operator sees beside the plan
// which of its images the site could not pull, and why.
func FailedAt(tx *store.Tx, site string, planned []proto.CacheImage) ([]FailedImage, error) {
	reports, err := tx.SiteCacheReports(site)
	if err != nil {
		return nil, err
	}
	held := heldAt(reports)
	out := []FailedImage{}
	for _, img := range planned {
		if h, ok := held[heldKey{img.Digest, img.Source}]; ok && h.State == proto.CacheFailed {
			out = append(out, FailedImage{Ref: img.Ref, Digest: img.Digest, Source: img.Source, Reason: h.Reason, RefusedHost: h.RefusedHost})
		}
	}
	return out, nil
}

// RecordSiteLocation records that a site's cache holds an artifact for a source
// (at.Site, at.Digest, at.Source) in at.State, of at.SizeBytes, and why it failed
// (at.Reason, at.RefusedHost), keeping the location's latest use. A location that says
// that already is not written again: a site's report rewrote the location of every
// image of each digest it holds, a store write each, so that a digest many tenants'
// images share took more than one etcd transaction at every report and the site's
// locations stopped following its cache. A later use is a change, shown in `sites
// locations`; it comes only with a deploy.
func RecordSiteLocation(tx *store.Tx, at store.SiteLocation) (store.SiteLocation, error) {
	loc, found, err := tx.SiteLocation(at.Site, at.Digest, at.Source)
	if err != nil {
		return loc, err
	}
	if loc.LastUsed.After(at.LastUsed) {
		at.LastUsed = loc.LastUsed
	}
	if found && sameLocation(loc, at) {
		return loc, nil
	}
	return tx.PutSiteLocation(at)
}

// sameLocation says whether stored says what at does: state, size, why it failed and
// last use.
func sameLocation(stored, at store.SiteLocation) bool {
	return stored.State == at.State && stored.SizeBytes == at.SizeBytes && stored.Reason == at.Reason &&
		stored.RefusedHost == at.RefusedHost && stored.LastUsed.Equal(at.LastUsed)
}
