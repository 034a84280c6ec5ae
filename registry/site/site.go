// Package site is the registry's side of the site agents: each site agent's NodeSpec,
// whose site.cacheImages are the verified images the site's pools pre-warm (kept up to
// date as pools, the catalog and signers change) and site.knownMacs the MACs of the
// machines enrolled at the site (kept up to date as machines are enrolled, bound a MAC
// or retired), PXE discovery (the MAC a site agent
// saw booting with the product UUID of a node enrolled without one becomes the node's
// MAC proposal), the site caches' reports recorded as image locations, and the commands
// relayed to a site agent (media.insert's URL bounded by the site's image sources, as
// registry/image's RefuseFetch rules). docs/site.md describes them.
package site

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/share"
	"github.com/better-compute/better-compute/registry/store"
)

// DefaultInterval is how often every site agent's NodeSpec is recomputed.
const DefaultInterval = 30 * time.Second

// Agent is the node id of the site agent of site: a site token's node id defaults to
// the site's name (docs/join.md).
func Agent(site string) string { return site }

// Config is what the service runs with.
type Config struct {
	Store *store.Store
	// Verifier checks pre-warmed images; nil is the signer allowlists.
	Verifier image.Verifier
	// Interval is how often every site is recomputed (DefaultInterval when zero), on
	// Clock (clock.Real when nil).
	Interval time.Duration
	Clock    clock.Clock
	Log      *slog.Logger
	// CacheKey is the registry's cache capability key (proto.EncodeCacheKey), given to
	// every site in its SiteSpec: with it the site's cache serves only URLs with a
	// capability.
	CacheKey string
}

// Service keeps the site agents' NodeSpecs and records PXE discoveries.
type Service struct {
	cfg  Config
	kick chan struct{}
	reps chan report

	// reported are the site agents whose cache report changed and is not recorded in
	// the image locations yet; enrolled the sites whose enrolled MACs changed since their
	// agent's NodeSpec was last written.
	reported, enrolled *pending
}

// pending is a set of keys hooks that must not block note for Run, which takes them
// whole: notes of one key before Run takes it are one.
type pending struct {
	mu     sync.Mutex
	keys   map[string]bool
	signal chan struct{}
}

func newPending() *pending { return &pending{keys: map[string]bool{}, signal: make(chan struct{}, 1)} }

// add notes key and wakes Run.
func (p *pending) add(key string) {
	p.mu.Lock()
	p.keys[key] = true
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// take returns the keys noted since the last take.
func (p *pending) take() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := p.keys
	p.keys = map[string]bool{}
	return keys
}

// report is an inventory section a site agent reported, queued for the store.
type report struct {
	node string
	data json.RawMessage
}

// New makes the service; Run runs it.
func New(cfg Config) *Service {
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	return &Service{cfg: cfg, kick: make(chan struct{}, 1), reps: make(chan report, 64),
		reported: newPending(), enrolled: newPending()}
}

// planInputs are the buckets a site's cache plan is computed from: a commit that writes
// one of them, however it was made, recomputes every site agent's NodeSpec.
var planInputs = []store.Bucket{store.BucketSites, store.BucketPools, store.BucketImages, store.BucketImageSigners}

// Kick asks for every site agent's NodeSpec to be recomputed soon: after a commit that
// wrote a site, a pool, an image or a signer (Run hooks it on the store), or when a site
// agent connects.
func (s *Service) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Inventory is the agent endpoint's inventory hook for the sections of site agents: a
// `site` section (an agent connected or moved) recomputes the NodeSpecs, a
// `discoveries` section is queued for the MAC proposals, an `images` section (the
// cache's report) is noted for the image locations. It never blocks.
func (s *Service) Inventory(node, section string, data json.RawMessage) {
	switch section {
	case proto.SectionSite:
		s.Kick()
	case proto.SectionDiscoveries:
		select {
		case s.reps <- report{node, data}:
		default:
			s.cfg.Log.Warn("discoveries queue full; the agent's next report carries them", "node", node)
		}
	case proto.SectionImages:
		s.reported.add(node)
	}
}

// recordCacheReports keeps the image locations in line with the latest reports of the
// site caches noted since the last call, read from the store.
func (s *Service) recordCacheReports() {
	for node := range s.reported.take() {
		if err := s.cfg.Store.Update(func(tx *store.Tx) error { return recordCacheReport(tx, node) }); err != nil {
			s.cfg.Log.Warn("site cache report", "node", node, "err", err)
		}
	}
}

// Run recomputes the site agents' NodeSpecs now, after every commit that wrote what the
// cache plans are computed from, on every Kick and every Interval, writes a site's
// known MACs again after every commit that changed the MACs enrolled there (that site's
// alone: a node write that changes no MAC, pool or retirement costs nothing here), and
// records discoveries and cache reports, until ctx ends.
func (s *Service) Run(ctx context.Context) {
	defer s.cfg.Store.OnWrite(s.Kick, planInputs...)()
	defer s.cfg.Store.OnSiteMACs(s.enrolled.add)()
	s.refreshAll()
	t := s.cfg.Clock.NewTimer(s.cfg.Interval)
	defer func() { t.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			s.refreshAll()
			t = s.cfg.Clock.NewTimer(s.cfg.Interval)
		case <-s.kick:
			s.refreshAll()
		case r := <-s.reps:
			s.discoveries(r)
		case <-s.reported.signal:
			s.recordCacheReports()
		case <-s.enrolled.signal:
			s.refreshEnrolled()
		}
	}
}

// refreshAll recomputes the NodeSpec of every site's agent, each site in a transaction
// of its own: one site's NodeSpec may take most of what an etcd transaction carries, and
// a site that fails leaves the others written.
func (s *Service) refreshAll() {
	var ids []string
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		var page store.Page
		for {
			sites, next, err := tx.Sites(page)
			if err != nil {
				return err
			}
			for _, site := range sites {
				ids = append(ids, site.ID)
			}
			if next == "" {
				return nil
			}
			page.Cursor = next
		}
	})
	if err != nil {
		s.cfg.Log.Error("listing the sites to recompute their agents' NodeSpecs", "err", err)
	}
	for _, site := range ids {
		err := s.cfg.Store.Update(func(tx *store.Tx) error {
			_, err := Refresh(tx, site, s.cfg.Verifier, s.cfg.CacheKey)
			return err
		})
		if err != nil {
			s.cfg.Log.Error("recomputing the site agent's NodeSpec", "site", site, "err", err)
		}
	}
}

// refreshEnrolled writes the known MACs of the sites whose enrolled MACs changed since
// the last call, each site in a transaction of its own.
func (s *Service) refreshEnrolled() {
	for site := range s.enrolled.take() {
		err := s.cfg.Store.Update(func(tx *store.Tx) error {
			_, err := refreshKnown(tx, site, nil)
			return err
		})
		if err != nil {
			s.cfg.Log.Warn("writing the site's known MACs", "site", site, "err", err)
		}
	}
}

// Refresh writes the NodeSpec of site's agent with the site's cache plan, image sources,
// cacheKey (the registry's cache capability key) and known MACs, keeping its standing
// boot entries. The generation moves only when the content changed.
func Refresh(tx *store.Tx, site string, v image.Verifier, cacheKey string) (proto.NodeSpec, error) {
	images, err := image.SiteCacheImages(tx, site, v)
	if err != nil {
		return proto.NodeSpec{}, err
	}
	record, err := tx.Site(site)
	if err != nil {
		return proto.NodeSpec{}, err
	}
	return refreshKnown(tx, site, func(s *proto.SiteSpec) {
		s.CacheImages, s.ImageSources, s.CacheKey = images, record.ImageSources, cacheKey
	})
}

// refreshKnown writes the NodeSpec of site's agent with the site's known MACs
// (KnownMACs), and what set changes besides, keeping the rest of its site section.
func refreshKnown(tx *store.Tx, site string, set func(*proto.SiteSpec)) (proto.NodeSpec, error) {
	known, err := KnownMACs(tx, site)
	if err != nil {
		return proto.NodeSpec{}, err
	}
	spec, err := tx.NodeSpec(Agent(site))
	switch {
	case proto.CodeOf(err) == proto.NotFound:
		spec = proto.NodeSpec{Node: Agent(site), Role: proto.RoleSite}
	case err != nil:
		return spec, err
	}
	if spec.Site == nil {
		spec.Site = &proto.SiteSpec{}
	}
	spec.Site.KnownMACs = known.MACs
	if set != nil {
		set(spec.Site)
	}
	return tx.SetNodeSpec(spec)
}

// Known is what a site knows of the machines enrolled at it: the MACs its agent's
// NodeSpec lists (site.knownMacs), and those the site's share rule left out.
type Known struct {
	// MACs are the site.knownMacs, sorted.
	MACs []string
	// LeftOut are the enrolled MACs the site does not know, by MAC.
	LeftOut []LeftOut
}

// LeftOut is a MAC enrolled at a site that the site does not know, whose node it is,
// and why: proto.ReasonSiteShare, the site was over proto.MaxKnownMACs and its tenant
// had the most MACs there.
type LeftOut struct {
	Tenant, Node, MAC, Reason string
}

// KnownMACs is what site's agents know (Known): the boot MACs of the machines enrolled
// in the site's pools that are not retired (store.SiteMACs). Any tenant may have pools
// at any site, so they keep to proto.MaxKnownMACs by the site's share rule (share.Trim):
// over it, the tenant with the most MACs at the site loses the MACs of its nodes
// enrolled last, and a tenant with no more than its share keeps all of its own, however
// many nodes another enrolls there.
func KnownMACs(tx *store.Tx, site string) (Known, error) {
	lists, err := tx.SiteMACs(site)
	if err != nil {
		return Known{}, err
	}
	dropped := share.Trim(lists, []share.Bound[store.SiteMAC]{{Max: proto.MaxKnownMACs, Measure: func(store.SiteMAC) int64 { return 1 }}})
	var out Known
	for _, macs := range lists {
		for _, m := range macs {
			out.MACs = append(out.MACs, m.MAC)
		}
	}
	slices.Sort(out.MACs)
	out.MACs = slices.Compact(out.MACs)
	for _, d := range dropped {
		out.LeftOut = append(out.LeftOut, LeftOut{Tenant: d.Tenant, Node: d.Entry.Node, MAC: d.Entry.MAC, Reason: proto.ReasonSiteShare})
	}
	slices.SortFunc(out.LeftOut, func(a, b LeftOut) int { return cmp.Or(cmp.Compare(a.MAC, b.MAC), cmp.Compare(a.Node, b.Node)) })
	return out, nil
}
