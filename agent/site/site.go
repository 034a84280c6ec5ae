// Package site is `bcd site`, the agent of a rack: it holds the registry session of the
// site's NodeSpec, runs the boot server with the boot entries of that NodeSpec, runs the
// image cache with its cacheImages and serves the cache beside the boot server's files
// to URLs with a capability (its own key's in boot scripts, the registry's in deploys),
// reports the `site`, `images` and `discoveries` inventory sections, and runs the relayed
// site steps against the machines' BMCs. docs/site.md describes it.
package site

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/agent/metrics"
	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/bmc/drivers"
	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/cache"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
)

// Run runs the site agent until ctx ends or one of its parts fails.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	id, err := bcdconf.LoadAgent(cfg.ConfigDir)
	if proto.CodeOf(err) == proto.InvalidConfig {
		return err // each problem of config.toml, naming the file, at its key there
	}
	if err != nil {
		return proto.Errorf(proto.InvalidConfig, "bcd config: %v (run bcd join --role site first)", err).WithPath("configDir")
	}
	conf := id.Config
	if conf.Role != string(proto.RoleSite) {
		return proto.Errorf(proto.InvalidConfig, "%s joined as a %s agent, not a site agent", cfg.ConfigDir, conf.Role).WithPath("configDir")
	}
	log = log.With("site", conf.Site)
	a, srv, err := open(cfg, log)
	if err != nil {
		return err
	}
	defer a.cache.Close()
	defer srv.Close()
	st := &steps{drivers: drivers.Registry(), env: bmc.Env{Log: log},
		entries: a.entries, holds: a.cache.Holds, changed: a.signalEntries}
	a.reportImages(a.cache.Entries())
	a.reportEntries()
	a.session, err = a.reports.open(func(hello map[string]json.RawMessage) (*session.Agent, error) {
		return session.New(session.Config{
			Addrs: conf.Endpoints(), Certificate: id.Certificate, ServerCAs: id.ServingCAs, Clock: cfg.Clock,
			// The NodeSpec is applied in memory only: a restarted site asks for it again.
			ObservedGeneration: 0,
			Inventory:          hello,
			Apply:              a.apply,
			Handlers:           st.handlers(),
			Log:                log,
		})
	})
	if err != nil {
		return err
	}
	if cfg.MetricsListen != "" {
		_, stop, err := metrics.Serve(cfg.MetricsListen, "metricsListen", a.metrics.Gatherer(), log)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.Info("site agent starting", "node", conf.NodeID, "registry", conf.AgentEndpoint, "httpBase", cfg.HTTPBase)
	return runAll(ctx,
		func(ctx context.Context) error { a.session.Run(ctx); return nil },
		func(ctx context.Context) error {
			a.session.KeepRenewed(ctx, func(previous, renewed tls.Certificate) error {
				return bcdconf.SaveRenewed(cfg.ConfigDir, previous, renewed)
			})
			return nil
		},
		func(ctx context.Context) error { return a.cache.Run(ctx) },
		func(ctx context.Context) error { return srv.Run(ctx) },
		func(ctx context.Context) error { a.discoveries.report(ctx, a.reports.set); return nil },
		func(ctx context.Context) error { a.reportEntriesChanges(ctx); return nil },
		func(ctx context.Context) error { a.watchCapacity(ctx, log); return nil },
	)
}

// open opens the parts of the site agent its session drives, all on cfg.Clock: the
// relayed boot entries, the image cache and the boot server with the cache mounted on
// its HTTP listener, the cache and the boot server counting into the agent's metrics.
// The caller closes the cache and the server.
func open(cfg Config, log *slog.Logger) (*agent, *boot.Server, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	// The state directory's name is fsynced in its parent: the files in it (the cache
	// capability key, the relayed boot entries) fsync only the directory itself.
	if err := fsutil.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, nil, proto.Errorf(proto.InvalidConfig, "state directory: %v", err).WithPath("stateDir")
	}
	a := &agent{clock: cfg.Clock, discoveries: newDiscoveries(), entriesChanged: make(chan struct{}, 1),
		reports: newReports(proto.SiteInventory{HTTPBase: cfg.HTTPBase, // the capacity as configured until the cache's is read
			CacheCapacityBytes: cfg.Cache.CapacityBytes, CacheConfiguredCapacityBytes: cfg.Cache.CapacityBytes})}
	a.metrics = metrics.NewSite(func() cache.Usage { return a.cache.Usage() }, a.reports.cacheCapacity,
		func() bool { return a.session != nil && a.session.Connected() }) // no session before run makes it
	var err error
	if a.entries, err = openEntries(filepath.Join(cfg.StateDir, entriesFile), cfg.Ramdisk, cfg.HTTPBase); err != nil {
		return nil, nil, err
	}
	key, err := loadOrCreateCapKey(cfg.StateDir)
	if err != nil {
		return nil, nil, err
	}
	a.entries.caps = &capSigner{key: key, clock: cfg.Clock, dir: cfg.StateDir}
	keys, err := a.entries.caps.restoredKeys()
	if err != nil {
		return nil, nil, err
	}
	cacheCfg := cache.Config{Dir: cfg.Cache.Dir, CapacityBytes: cfg.Cache.CapacityBytes, ReserveBytes: cfg.Cache.ReserveBytes, MaxPulls: cfg.Cache.MaxPulls,
		BandwidthBytesPerSec: cfg.Cache.BandwidthBytesPerSec, RetryInterval: time.Duration(cfg.Cache.RetryInterval),
		Reporter: cache.ReporterFunc(a.reportImages), Logger: log, Clock: cfg.Clock, Observer: a.metrics,
		SpaceMoved: func() { a.refreshCapacity(log) }}
	if cfg.Cache.CAFile != "" {
		if cacheCfg.RootCAs, err = loadCAs(cfg.Cache.CAFile); err != nil {
			return nil, nil, err
		}
	}
	if a.cache, err = cache.Open(cacheCfg); err != nil {
		if pe, ok := errors.AsType[*proto.Error](err); ok && pe.Details.Path != "" {
			err = pe.WithPath("cache." + pe.Details.Path) // the field as the site's config names it
		}
		return nil, nil, err
	}
	a.cache.RequireCapabilities(keys)
	a.refreshCapacity(log) // for the first hello
	srv, err := boot.New(cfg.Boot, boot.Deps{Entries: a.entries, Enrolled: a.entries.enrolled, Discoveries: a.discoveries, Log: log, Clock: cfg.Clock, Observer: a.metrics,
		Handlers: map[string]http.Handler{cache.ImagePathPrefix: a.cache.Handler()}})
	if err != nil {
		a.cache.Close()
		return nil, nil, err
	}
	return a, srv, nil
}

// entriesFile is the state file of the relayed boot entries.
const entriesFile = "boot-entries.json"

// agent ties the session to the boot server and the cache.
type agent struct {
	clock          clock.Clock
	session        *session.Agent
	cache          *cache.Cache
	entries        *entries
	discoveries    *discoveries
	entriesChanged chan struct{}
	// reports sends the inventory sections on session, each cut to its budget.
	reports *reports
	// planned are the digests of the cache plan last applied (the NodeSpec's
	// cacheImages), which the `images` section keeps first.
	planned atomic.Pointer[map[string]bool]
	// metrics counts what the boot server and the cache do, served on metricsListen.
	metrics *metrics.Site
	// capacityMu guards filesystemFigure, the cache's filesystem figure last reported
	// (steadyFilesystem): refreshCapacity alone touches it.
	capacityMu       sync.Mutex
	filesystemFigure int64
}

// signalEntries tells reportEntriesChanges that the boot entries changed.
func (a *agent) signalEntries() {
	select {
	case a.entriesChanged <- struct{}{}:
	default:
	}
}

// reportEntriesChanges sends the `bootEntries` section whenever it changed, until ctx
// ends.
func (a *agent) reportEntriesChanges(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.entriesChanged:
			a.reportEntries()
		}
	}
}

// reportEntries is the `bootEntries` section now, cut to its budget.
func (a *agent) reportEntries() {
	data, omitted := a.entries.section()
	a.reports.set(proto.SectionBootEntries, data, omitted)
}

// apply makes a pushed NodeSpec's site section take effect: the cache's desired images
// and the image sources its pulls may fetch from, the boot entries, the MACs enrolled at
// the site (known to the boot server's DHCP) and the keys of the cache's capabilities.
// The entries are applied even when some cache entry is refused.
func (a *agent) apply(_ context.Context, spec proto.NodeSpec) error {
	var s proto.SiteSpec
	if spec.Site != nil {
		s = *spec.Site
	}
	a.entries.setStanding(s.BootEntries)
	a.entries.setEnrolled(s.KnownMACs)
	a.signalEntries()
	keys, badKey := a.entries.caps.applyKeys(s)
	a.cache.RequireCapabilities(keys)
	images, refused := allowedImages(s)
	planned := map[string]bool{}
	for _, img := range images {
		planned[img.Digest] = true
	}
	a.planned.Store(&planned) // before SetDesired, whose report orders by it
	a.cache.SetBound(siteBound(s))
	return errors.Join(badKey, refused, a.cache.SetDesired(images))
}

// siteBound is where the site's cache may fetch from: the site's image sources. The
// pools' narrower lists bound what the registry plans, not the cache, whose copy serves
// any pool of the site.
func siteBound(s proto.SiteSpec) proto.SourceBound { return proto.SourceBound{Site: s.ImageSources} }

// allowedImages are the cache images of a site section whose source is among its image
// sources. The registry plans none other; the site checks again, so that no plan, stale
// or wrong, makes it fetch from a host the platform did not list (and the cache's bound
// keeps each pull's redirects, token realms and addresses within them too). Each image
// left out is an INVALID_CONFIG at its source.
func allowedImages(s proto.SiteSpec) ([]proto.CacheImage, error) {
	var keep []proto.CacheImage
	var refused []error
	for i, img := range s.CacheImages {
		if r, _ := siteBound(s).Refused(img.Source); r {
			refused = append(refused, proto.Errorf(proto.InvalidConfig, "image %s: its source's host is not among the site's image sources %v, so the site does not fetch it", img.Ref, s.ImageSources).
				WithPath(fmt.Sprintf("site.cacheImages[%d].source", i)))
			continue
		}
		keep = append(keep, img)
	}
	return keep, errors.Join(refused...)
}

// reportImages is the cache's Reporter: the `images` inventory section, cut to its
// budget.
func (a *agent) reportImages(list []proto.ImageCacheEntry) {
	var planned map[string]bool
	if p := a.planned.Load(); p != nil {
		planned = *p
	}
	data, omitted := imagesSection(list, planned)
	a.reports.set(proto.SectionImages, data, omitted)
}

// imagesSection is the `images` section of the cache's entries, cut to its budget and
// the number left out. It keeps first what the registry locates deploys by: ready
// images before pulling, evicting and failed ones (the order of the site's state across
// its agents, proto.CacheStateRank), then the images of the site's cache plan (planned),
// then the ones used most recently, then by digest. The registry trims the
// plan to each tenant's share of the site, so the images a tenant pre-warms now come
// before the many another tenant's pools no longer list, which the cache keeps ready
// until it needs the room, and which would otherwise push them out of the section.
func imagesSection(list []proto.ImageCacheEntry, planned map[string]bool) (json.RawMessage, int) {
	list = slices.Clone(list)
	slices.SortFunc(list, func(a, b proto.ImageCacheEntry) int {
		return cmp.Or(cmp.Compare(proto.CacheStateRank(a.State), proto.CacheStateRank(b.State)),
			-cmpBool(planned[a.Digest], planned[b.Digest]),
			b.LastUsed.Compare(a.LastUsed), strings.Compare(a.Digest, b.Digest))
	})
	return cut(list, imagesBudget)
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// runAll runs each part until ctx ends or one returns; the first error wins and stops
// the others.
func runAll(ctx context.Context, parts ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(parts))
	for _, p := range parts {
		go func() { errc <- p(ctx) }()
	}
	var first error
	for range parts {
		err := <-errc
		if first == nil && err != nil && !errors.Is(err, context.Canceled) {
			first = err
		}
		cancel()
	}
	return first
}

func loadCAs(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, proto.Errorf(proto.InvalidConfig, "cache CA file: %v", err).WithPath("cache.caFile")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, proto.Errorf(proto.InvalidConfig, "cache CA file %s holds no PEM certificate", path).WithPath("cache.caFile")
	}
	return pool, nil
}
