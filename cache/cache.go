// Package cache is a site's image cache: it pulls the images its site agent is told to
// hold, makes a copy visible only once its digest matched, keeps an index of them in
// bbolt, evicts the least recently used when space runs short (never a pinned image or
// one a ramdisk is reading), reports the `images` inventory section, and serves the
// images to the site's ramdisks by digest over HTTP. See docs/cache.md.
package cache

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/better-compute/better-compute/cache/throttle"
	"github.com/better-compute/better-compute/fetch"
	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
)

// Cache is one site's image cache. Open it, call Run in a goroutine, hand it the desired
// list with SetDesired, and mount Handler on the boot server's HTTP mux.
type Cache struct {
	cfg    Config
	idx    *index
	bucket *throttle.Bucket

	readyDir, partialDir string
	// reserve is the free space of Dir's filesystem no pull writes into
	// (Config.ReserveBytes, or its default).
	reserve int64

	mu sync.Mutex
	// client fetches the pulls; bound is where it may fetch from, nil until SetBound.
	client  *fetch.Client
	bound   *proto.SourceBound
	entries map[string]*entry
	desired []proto.CacheImage // nil until the first SetDesired
	wanted  map[string]bool    // the digests of desired
	running int                // jobs (pulls and verifications) running
	dirty   map[string]bool    // digests whose last use is not yet in the index
	// spaceMoved: a pull ended ready or failed for capacity, or an eviction freed a file,
	// since the report last told Config.SpaceMoved.
	spaceMoved bool

	// capKeys are the keys whose capabilities open an image (RequireCapabilities);
	// nil serves every request.
	capKeys atomic.Pointer[[]ed25519.PublicKey]

	wake    chan struct{} // the scheduler has something to look at
	changed chan struct{} // the report is out of date
	jobs    sync.WaitGroup
}

// entry is an image the cache holds or works on.
type entry struct {
	rec      record
	progress atomic.Int64 // bytes in partial/ while pulling
	// verify: the file in sha256/ has not been re-hashed since start-up; until it is, the
	// image is reported as pulling and not served.
	verify bool
	// noRoom: the last try found no space; it is tried again whenever space may have freed.
	noRoom bool
	busy   bool // a pull or a verification runs
	// checking: the pull running is a check of another source of the ready file, into
	// partial/; the file stays as it is.
	checking bool
	// failed maps a source of the desired list to its last failed pull (or check); it
	// is tried again RetryInterval later, or, when the bound refused it, as soon as the
	// bound changes (SetBound).
	failed map[string]failure
	// readers are the HTTP responses streaming the file. They pin it against eviction
	// only for the time a reader at Config.MinReadBytesPerSec takes to read it whole,
	// plus Config.ReadGrace, counted from readSince (pinnedUntil); lastRead is when the
	// last of them ended. cutting: eviction wants the file and its readers past their
	// pin are being cut; no reader starts on it meanwhile.
	readers   map[*reader]struct{}
	readSince time.Time
	lastRead  time.Time
	cutting   bool
	cancel    context.CancelFunc
}

// failure is when a source's last pull failed, and whether the bound refused it, at
// which host (proto.RefusedSource.RefusedHost).
type failure struct {
	at          time.Time
	refused     bool
	refusedHost string
}

// Open opens (or makes) the cache in cfg.Dir and puts what a crash left in order: files
// under partial/ that no pull will resume are removed, an eviction is finished, and every
// file under sha256/ is marked for re-verification before it is served again.
func Open(cfg Config) (*Cache, error) {
	cfg = cfg.withDefaults()
	if cfg.Dir == "" {
		return nil, proto.Errorf(proto.InvalidConfig, "cache directory is empty").WithPath("dir")
	}
	if cfg.ReserveBytes < 0 {
		return nil, proto.Errorf(proto.InvalidConfig, "reserve %d bytes is negative: give the bytes of the cache's filesystem to keep free, or leave it out for the default", cfg.ReserveBytes).WithPath("reserveBytes")
	}
	c := &Cache{
		cfg:        cfg,
		readyDir:   filepath.Join(cfg.Dir, "sha256"),
		partialDir: filepath.Join(cfg.Dir, "partial"),
		entries:    map[string]*entry{},
		dirty:      map[string]bool{},
		wake:       make(chan struct{}, 1),
		changed:    make(chan struct{}, 1),
	}
	for _, d := range []string{cfg.Dir, c.readyDir, c.partialDir} {
		if err := fsutil.MkdirAll(d, 0o755); err != nil { // each name made is fsynced in its parent
			return nil, fmt.Errorf("make cache directory: %w", err)
		}
	}
	space, err := fsutil.SpaceOf(cfg.Dir)
	if err != nil {
		return nil, err
	}
	c.reserve = cmp.Or(cfg.ReserveBytes, DefaultReserve(space.Total))
	if c.reserve >= space.Total {
		return nil, proto.Errorf(proto.InvalidConfig, "reserve %d bytes is not less than the %d bytes of the filesystem of %s: give less, leave it out for the default, or move the cache to a larger filesystem",
			c.reserve, space.Total, cfg.Dir).WithPath("reserveBytes")
	}
	idx, err := openIndex(cfg.Dir)
	if err != nil {
		return nil, err
	}
	c.idx = idx
	if err := c.recover(); err != nil {
		idx.close()
		return nil, err
	}
	c.client = fetch.NewClient(&http.Client{Transport: cfg.transport()})
	if cfg.BandwidthBytesPerSec > 0 {
		c.bucket = throttle.New(cfg.Clock, cfg.BandwidthBytesPerSec, min(cfg.BandwidthBytesPerSec, copyChunk))
	}
	return c, nil
}

// SetBound makes b where the cache's pulls may fetch from, from their next request on:
// every request of a pull (the source's, a redirect's, a token realm's) goes only to a
// host and port b allows, and every connection only to an address it allows
// (fetch.Bound); a refusal fails the pull. A pull under way is stopped and started again
// under b, from the bytes it holds. bcd site sets its site's image sources before every
// SetDesired. A cache never given a bound fetches without one.
//
// A bound other than the one the cache has (the first after a start among them) makes
// every source a bound refused be tried again at once: the operator who lists the host
// a refusal named should not wait out RetryInterval. Sources that failed otherwise keep
// their wait.
func (c *Cache) SetBound(b proto.SourceBound) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bound != nil && slices.Equal(c.bound.Site, b.Site) && slices.Equal(c.bound.Pool, b.Pool) {
		return
	}
	// A new client, so that no connection dialed under the old bound serves the new one.
	c.client.CloseIdleConnections()
	c.client, c.bound = fetch.NewBoundClient(c.cfg.transport(), fetch.Bound{Sources: b}), &b
	for _, e := range c.entries {
		maps.DeleteFunc(e.failed, func(_ string, f failure) bool { return f.refused })
		// A pull under way fetches with the old client: its resumes would follow its
		// source's redirects under the old bound, to a host the list no longer names,
		// for as long as the pull lasts. Stopped, it keeps its partial file and starts
		// again at once with the new client.
		if e.cancel != nil {
			e.cancel()
		}
	}
	c.kick()
}

// fetcher is the client a pull starting now fetches with.
func (c *Cache) fetcher() *fetch.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.client
}

// Close closes the index. Run must have returned.
func (c *Cache) Close() error { return c.idx.close() }

// Run verifies, pulls, evicts and reports until ctx is done; then it stops the pulls
// (their partial files stay, to be resumed), writes the last uses and returns.
func (c *Cache) Run(ctx context.Context) error {
	reports := make(chan struct{})
	go func() {
		defer close(reports)
		c.reportLoop(ctx)
	}()
	c.notify()
	for {
		retry := c.schedule(ctx)
		select {
		case <-ctx.Done():
			c.mu.Lock()
			for _, e := range c.entries {
				if e.cancel != nil {
					e.cancel()
				}
			}
			c.mu.Unlock()
			c.jobs.Wait()
			<-reports
			return errors.Join(c.flushLastUse(), ctx.Err())
		case <-c.wake:
		case <-retry:
		}
	}
}

// kick asks the scheduler to look again.
func (c *Cache) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// notify marks the report out of date.
func (c *Cache) notify() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// reportLoop writes last uses to the index and tells the Reporter, once per burst of
// changes.
func (c *Cache) reportLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
		}
		if err := c.flushLastUse(); err != nil {
			c.cfg.Logger.Error("cache: write last uses", "err", err)
		}
		// The entries and the flag are read together: a report that shows a pull ended or
		// an image evicted comes after SpaceMoved was told of it.
		c.mu.Lock()
		entries, moved := c.imageEntries(), c.spaceMoved
		c.spaceMoved = false
		c.mu.Unlock()
		if moved && c.cfg.SpaceMoved != nil {
			c.cfg.SpaceMoved()
		}
		if c.cfg.Reporter != nil {
			c.cfg.Reporter.ReportImages(entries)
		}
	}
}

// flushLastUse writes the last uses touched since the previous flush.
func (c *Cache) flushLastUse() error {
	c.mu.Lock()
	var recs []record
	for d := range c.dirty {
		if e := c.entries[d]; e != nil {
			recs = append(recs, e.rec)
		}
	}
	clear(c.dirty)
	c.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	return c.idx.put(recs...)
}

// Entries returns the `images` inventory section: every image the cache holds or works
// on, by digest.
func (c *Cache) Entries() []proto.ImageCacheEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.imageEntries()
}

// imageEntries is Entries; c.mu is held.
func (c *Cache) imageEntries() []proto.ImageCacheEntry {
	out := make([]proto.ImageCacheEntry, 0, len(c.entries))
	for _, e := range c.entries {
		ie := proto.ImageCacheEntry{Digest: e.rec.Digest, State: e.rec.State, SizeBytes: e.rec.SizeBytes, LastUsed: e.rec.LastUsed,
			Sources: slices.Clone(e.rec.Sources)}
		if !e.verify && e.rec.Sources == nil && e.rec.Source != "" && (e.rec.State == proto.CachePulling || e.rec.State == proto.CacheFailed) {
			ie.Sources = []string{e.rec.Source} // no file yet: the source pulled from
		}
		if !e.verify && e.rec.State == proto.CacheFailed {
			ie.Reason, ie.RefusedHost = e.rec.Reason, e.rec.RefusedHost
		}
		ie.Refused = e.refusedSources(ie)
		switch {
		case e.verify:
			ie.State = proto.CachePulling
		case e.rec.State == proto.CachePulling:
			ie.SizeBytes = e.progress.Load()
		case e.rec.State == proto.CacheFailed:
			ie.SizeBytes = 0
		}
		out = append(out, ie)
	}
	slices.SortFunc(out, func(a, b proto.ImageCacheEntry) int { return strings.Compare(a.Digest, b.Digest) })
	return out
}

// refusedSources are the sources of e the bound refused (proto.ImageCacheEntry.Refused)
// besides those ie, its report, names already: its sources, and the source its reason
// is about. c.mu is held.
func (e *entry) refusedSources(ie proto.ImageCacheEntry) []proto.RefusedSource {
	var out []proto.RefusedSource
	for _, src := range slices.Sorted(maps.Keys(e.failed)) {
		f := e.failed[src]
		if !f.refused || f.refusedHost == "" || slices.Contains(ie.Sources, src) || ie.Reason != "" && src == e.rec.Source {
			continue
		}
		if len(out) == proto.MaxImageCacheSources {
			break
		}
		out = append(out, proto.RefusedSource{Source: src, RefusedHost: f.refusedHost})
	}
	return out
}

func (c *Cache) readyPath(d string) string   { return filepath.Join(c.readyDir, d) }
func (c *Cache) partialPath(d string) string { return filepath.Join(c.partialDir, d) }

// removeFile removes a file and fsyncs its directory; a missing file is no error.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(path))
}
