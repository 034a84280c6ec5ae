package cache

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"time"

	"github.com/better-compute/better-compute/fetch"
	"github.com/better-compute/better-compute/proto"
)

// schedule starts what may start: re-verifications first (they decide what is ready),
// then the pulls of desired images in list order (a ready image's pull from a source it
// was not pulled from is a check of that source), at most MaxPulls jobs at once. It
// returns a channel that fires when a failed source is due to be tried again, or nil.
func (c *Cache) schedule(ctx context.Context) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range slices.Sorted(maps.Keys(c.entries)) {
		if e := c.entries[d]; e.verify && !e.busy && c.running < c.cfg.MaxPulls {
			c.startVerify(ctx, e)
		}
	}
	if c.desired == nil {
		return nil
	}
	c.evictOverCapacity()
	now := c.cfg.Clock.Now()
	var next time.Duration
	// Images of unknown size come after the others: they take only the room left.
	order := slices.Clone(c.desired)
	slices.SortStableFunc(order, func(a, b proto.CacheImage) int { return cmp.Compare(sizeUnknown(a), sizeUnknown(b)) })
	for _, img := range order {
		e := c.entries[img.Digest]
		if e == nil || e.busy || e.verify || e.rec.State == proto.CacheEvicting {
			continue
		}
		check := e.rec.State == proto.CacheReady
		if check && (slices.Contains(e.rec.Sources, img.Source) || len(e.rec.Sources) >= proto.MaxImageCacheSources) {
			continue
		}
		if f, ok := e.failed[img.Source]; ok {
			if wait := f.at.Add(c.cfg.RetryInterval).Sub(now); wait > 0 {
				if next == 0 || wait < next {
					next = wait
				}
				continue
			}
		}
		if c.running >= c.cfg.MaxPulls {
			continue
		}
		if check {
			if img.SizeBytes == 0 {
				img.SizeBytes = e.rec.SizeBytes // the ready file's: the catalog does not know it
			}
			// The check's bytes sit in partial/ beside the ready file until they are hashed.
			if c.makeRoom(nil, img.SizeBytes, false) == nil {
				c.startPull(ctx, e, img)
			}
			continue
		}
		if err := c.makeRoom(e, max(img.SizeBytes, e.progress.Load()), img.SizeBytes == 0); err != nil {
			if !errors.Is(err, errReadersCut) {
				c.fail(e, err)
			}
			e.noRoom = true
			continue
		}
		c.startPull(ctx, e, img)
	}
	if wait := c.nextPinLapse(now); wait > 0 && (next == 0 || wait < next) {
		next = wait
	}
	if next == 0 {
		return nil
	}
	return c.cfg.Clock.After(next)
}

// nextPinLapse is how long until the first pin of a read image lapses, while a pull
// waits for room (it may then cut the readers and take the room), or 0. c.mu is held.
func (c *Cache) nextPinLapse(now time.Time) time.Duration {
	waiting := false
	for _, e := range c.entries {
		waiting = waiting || e.noRoom && c.wanted[e.rec.Digest]
	}
	var next time.Duration
	for _, e := range c.entries {
		if !waiting || !c.pinned(e, now) {
			continue
		}
		if wait := c.pinnedUntil(e).Sub(now); next == 0 || wait < next {
			next = wait
		}
	}
	return next
}

// sizeUnknown orders an image of unknown size after the others.
func sizeUnknown(img proto.CacheImage) int {
	if img.SizeBytes == 0 {
		return 1
	}
	return 0
}

// startPull runs a pull of img in its own goroutine: of the image, or, when it is ready,
// a check of img's source. c.mu is held.
func (c *Cache) startPull(ctx context.Context, e *entry, img proto.CacheImage) {
	jctx, cancel := context.WithCancel(ctx)
	e.busy, e.cancel, e.noRoom = true, cancel, false
	e.checking = e.rec.State == proto.CacheReady
	c.running++
	check := e.checking
	if !check {
		if img.Source != e.rec.Source {
			// The partial file's bytes are another source's: this source serves them all.
			if err := removeFile(c.partialPath(img.Digest)); err != nil {
				c.cfg.Logger.Error("cache: remove a partial file", "digest", img.Digest, "err", err)
			}
			e.progress.Store(0)
			e.rec.Validator = ""
		}
		e.rec.Ref, e.rec.Source, e.rec.SizeBytes = img.Ref, img.Source, img.SizeBytes
		e.rec.State, e.rec.Error, e.rec.FailedAt, e.rec.Reason, e.rec.RefusedHost = proto.CachePulling, "", time.Time{}, "", ""
		c.put(e)
	}
	validator := e.rec.Validator
	c.cfg.Logger.Info("cache: pull", "digest", img.Digest, "ref", img.Ref, "source", img.Source, "check", check, "from", e.progress.Load())
	c.jobs.Add(1)
	go func() {
		defer c.jobs.Done()
		size, err := c.pull(jctx, e, img, validator, check)
		stopped := jctx.Err() != nil
		cancel()
		c.pullDone(e, img.Source, size, err, stopped)
	}()
}

// pullDone records how a pull from src ended; stopped says it was stopped (the image
// left the desired list, or Run is ending) rather than failed.
func (c *Cache) pullDone(e *entry, src string, size int64, err error, stopped bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.kick()
	defer c.notify()
	e.busy, e.cancel = false, nil
	c.running--
	d := e.rec.Digest
	if o := c.cfg.Observer; o != nil {
		switch {
		case err == nil:
			o.PullEnded("ready")
		case stopped || !c.wanted[d]:
			o.PullEnded("stopped")
		default:
			o.PullEnded("failed")
		}
	}
	if err == nil {
		delete(e.failed, src)
	} else if !stopped && c.wanted[d] {
		if e.failed == nil {
			e.failed = map[string]failure{}
		}
		_, host := failureOf(err)
		e.failed[src] = failure{at: c.cfg.Clock.Now(), refused: errors.Is(err, fetch.ErrNotAllowed), refusedHost: host}
	}
	if e.checking {
		c.checkDone(e, src, err, stopped)
		return
	}
	switch {
	case err == nil:
		c.spaceMoved = true
		e.rec.State, e.rec.SizeBytes, e.rec.Error, e.rec.FailedAt, e.rec.Validator = proto.CacheReady, size, "", time.Time{}, ""
		e.rec.Sources = []string{src}
		e.progress.Store(0)
		c.put(e)
		c.cfg.Logger.Info("cache: ready", "digest", d, "bytes", size, "source", src)
	case !c.wanted[d]:
		if derr := c.drop(e); derr != nil {
			c.cfg.Logger.Error("cache: drop", "digest", d, "err", derr)
		}
	case stopped:
		// Run is ending, or the image left the list and came back: the partial file stays,
		// to be resumed.
	default:
		if rerr := removeFile(c.partialPath(d)); rerr != nil {
			err = errors.Join(err, rerr)
		}
		e.progress.Store(0)
		c.fail(e, err)
	}
}

// checkDone records how a check of src against e's ready file ended: its bytes go, and
// src joins the file's sources when they hashed to the digest. The file stays, for its
// sources, whatever the check found. A stopped check is tried again from zero. c.mu is
// held.
func (c *Cache) checkDone(e *entry, src string, err error, stopped bool) {
	d := e.rec.Digest
	e.checking = false
	if rerr := removeFile(c.partialPath(d)); rerr != nil {
		c.cfg.Logger.Error("cache: remove a check's bytes", "digest", d, "err", rerr)
	}
	e.rec.Validator = ""
	if err != nil {
		c.put(e)
		if !stopped {
			c.cfg.Logger.Warn("cache: check of a source failed; the file is not served for it", "digest", d, "source", src, "err", err)
		}
		return
	}
	if i, found := slices.BinarySearch(e.rec.Sources, src); !found && len(e.rec.Sources) < proto.MaxImageCacheSources {
		e.rec.Sources = slices.Insert(e.rec.Sources, i, src)
	}
	c.put(e)
	c.cfg.Logger.Info("cache: source checked", "digest", d, "source", src)
}

// fail marks e failed with err, and with the reason its report gives (failureOf).
// c.mu is held.
func (c *Cache) fail(e *entry, err error) {
	if e.rec.State == proto.CacheFailed && e.rec.Error == err.Error() {
		return
	}
	e.rec.State, e.rec.Error, e.rec.FailedAt = proto.CacheFailed, err.Error(), c.cfg.Clock.Now()
	e.rec.Reason, e.rec.RefusedHost = failureOf(err)
	c.spaceMoved = c.spaceMoved || e.rec.Reason == proto.ReasonCapacity
	e.rec.Validator = ""
	c.put(e)
	c.notify()
	if refused, ok := errors.AsType[*fetch.RefusedError](err); ok {
		c.cfg.Logger.Warn("cache: pull refused: the fetch would leave the site's image sources", "digest", e.rec.Digest,
			"refused", refused.Hop, "host", net.JoinHostPort(refused.Host, refused.Port), "err", err)
		return
	}
	c.cfg.Logger.Warn("cache: pull failed", "digest", e.rec.Digest, "err", err)
}

// failureOf is what a failed image's report says of err (proto.ImageCacheEntry's
// Reason and RefusedHost): a refusal of the bound is source-not-allowed with the host it
// was refused at, never the refused request's URL; an error with a reason the report
// knows (capacity) gives it; any other none.
func failureOf(err error) (reason, refusedHost string) {
	if refused, ok := errors.AsType[*fetch.RefusedError](err); ok {
		return proto.ReasonSourceNotAllowed, refused.Refused()
	}
	if pe, ok := errors.AsType[*proto.Error](err); ok && slices.Contains(proto.ImageCacheReasons, pe.Details.Reason) {
		return pe.Details.Reason, ""
	}
	return "", ""
}

// put writes e's record; a failure is logged, the in-memory state stands. c.mu is held.
func (c *Cache) put(e *entry) {
	if err := c.idx.put(e.rec); err != nil {
		c.cfg.Logger.Error("cache: write index", "digest", e.rec.Digest, "err", err)
	}
}
