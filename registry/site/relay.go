package site

import (
	"encoding/json"
	"strings"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
)

// Command is the payload a site step of run (empty for a command no run sent) relays
// to the site agent for node, and the tenant whose machine it acts on (the command's
// share of the site agent's slots, proto.TenantCommandShare): a SiteCommand naming the
// machine and its driver bindings (metal.CommandDrivers: the run's profile's over the
// node's for the step's own operation) around the step's input.
func Command(tx *store.Tx, node, run, step, kind string, input json.RawMessage) (payload json.RawMessage, tenant string, err error) {
	n, err := tx.Node(node)
	if err != nil {
		return nil, "", err
	}
	var r store.Run
	if run != "" {
		if r, err = tx.Run(run); err != nil {
			return nil, "", err
		}
	}
	drivers, err := metal.CommandDrivers(tx, n, r, step, kind)
	if err != nil {
		return nil, "", err
	}
	payload, err = proto.Marshal(proto.SiteCommand{Node: n.ID, Drivers: drivers, Input: input})
	return payload, n.Tenant, err
}

// CacheURL is image at site's cache when the site holds it ready, "" otherwise: the site
// agent's httpBase (its `site` inventory section) + /images/sha256/<digest>.
func CacheURL(tx *store.Tx, site, image, digest string) (string, error) {
	loc, err := tx.ImageLocation(site, image)
	if proto.CodeOf(err) == proto.NotFound || (err == nil && loc.State != proto.CacheReady) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	si, err := tx.SiteInventory(Agent(site))
	if err != nil || si.HTTPBase == "" {
		return "", err
	}
	return strings.TrimSuffix(si.HTTPBase, "/") + "/images/sha256/" + digest, nil
}

// recordCacheReport records the site agent's stored `images` section as its site's
// cache report, a cut one (its stored `site` section counts entries left out of it) as
// such.
func recordCacheReport(tx *store.Tx, node string) error {
	site, err := tx.Site(node)
	if err != nil {
		return err
	}
	s, ok, err := tx.InventorySection(node, proto.SectionImages)
	if err != nil || !ok {
		return err
	}
	info, err := tx.SiteInventory(node)
	if err != nil {
		return err
	}
	var entries []proto.ImageCacheEntry
	if err := json.Unmarshal(s.Data, &entries); err != nil {
		return proto.Errorf(proto.InvalidInput, "the images section does not decode: %v", err)
	}
	// A report refused for its size leaves the one before it, which may name fewer
	// images than the cache holds: it drops no location, as a cut one.
	_, err = image.RecordSiteCacheReport(tx, site.ID, node, entries, info.SectionCut(proto.SectionImages) || s.Refused != nil)
	return err
}
