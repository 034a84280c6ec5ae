package cache

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// schedule starts what may start: re-verifications first (they decide what is ready),
// then the pulls of desired images in list order, at most MaxPulls jobs at once. It
// returns a channel that fires when a failed image is due to be tried again, or nil.
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
	for _, img := range c.desired {
		e := c.entries[img.Digest]
		if e == nil || e.busy || e.verify || e.rec.State == proto.CacheReady || e.rec.State == proto.CacheEvicting {
			continue
		}
		if e.rec.State == proto.CacheFailed && !e.noRoom {
			if wait := e.rec.FailedAt.Add(c.cfg.RetryInterval).Sub(now); wait > 0 {
				if next == 0 || wait < next {
					next = wait
				}
				continue
			}
		}
		if c.running >= c.cfg.MaxPulls {
			continue
		}
		if !c.makeRoom(e, max(img.SizeBytes, e.progress.Load())) {
			c.fail(e, proto.Errorf(proto.InvalidState, "cache full: %d bytes do not fit in %d, even after evicting every unpinned, unused image no longer desired",
				img.SizeBytes, c.cfg.CapacityBytes-c.usedBytes(e)).WithReason(proto.ReasonCapacity))
			e.noRoom = true
			continue
		}
		c.startPull(ctx, e, img)
	}
	if next == 0 {
		return nil
	}
	return c.cfg.Clock.After(next)
}

// startPull runs a pull of img in its own goroutine. c.mu is held.
func (c *Cache) startPull(ctx context.Context, e *entry, img proto.CacheImage) {
	jctx, cancel := context.WithCancel(ctx)
	e.busy, e.cancel, e.noRoom = true, cancel, false
	c.running++
	if e.rec.State != proto.CachePulling {
		e.rec.State, e.rec.Error, e.rec.FailedAt = proto.CachePulling, "", time.Time{}
		c.put(e)
	}
	validator := e.rec.Validator
	c.cfg.Logger.Info("cache: pull", "digest", img.Digest, "ref", img.Ref, "from", e.progress.Load())
	c.jobs.Add(1)
	go func() {
		defer c.jobs.Done()
		size, err := c.pull(jctx, e, img, validator)
		stopped := jctx.Err() != nil
		cancel()
		c.pullDone(e, size, err, stopped)
	}()
}

// pullDone records how a pull ended; stopped says it was stopped (the image left the
// desired list, or Run is ending) rather than failed.
func (c *Cache) pullDone(e *entry, size int64, err error, stopped bool) {
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
	switch {
	case err == nil:
		e.rec.State, e.rec.SizeBytes, e.rec.Error, e.rec.FailedAt, e.rec.Validator = proto.CacheReady, size, "", time.Time{}, ""
		e.progress.Store(0)
		c.put(e)
		c.cfg.Logger.Info("cache: ready", "digest", d, "bytes", size)
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

// fail marks e failed with err. c.mu is held.
func (c *Cache) fail(e *entry, err error) {
	if e.rec.State == proto.CacheFailed && e.rec.Error == err.Error() {
		return
	}
	e.rec.State, e.rec.Error, e.rec.FailedAt = proto.CacheFailed, err.Error(), c.cfg.Clock.Now()
	e.rec.Validator = ""
	c.put(e)
	c.notify()
	c.cfg.Logger.Warn("cache: pull failed", "digest", e.rec.Digest, "err", err)
}

// put writes e's record; a failure is logged, the in-memory state stands. c.mu is held.
func (c *Cache) put(e *entry) {
	if err := c.idx.put(e.rec); err != nil {
		c.cfg.Logger.Error("cache: write index", "digest", e.rec.Digest, "err", err)
	}
}
