package site

import (
	"context"
	"log/slog"
	"time"

	"github.com/better-compute/better-compute/cache"
)

// capacityInterval is how often the site reads what its cache can hold and, when the
// figure it reports moved (steadyFilesystem), sends the `site` section again, besides
// reading it at once when its cache says the room moved (a pull ended ready or failed
// for capacity, an eviction freed a file: cache.Config.SpaceMoved). The minute is for
// what the cache is not told of, the files others write beside it (logs, leases): a
// figure that much late costs little, since no pull writes past the room it reads
// itself (before it starts, then every MiB) and one that finds none fails for capacity,
// which refreshes the figure at once; and one statfs a minute costs nothing, while the
// steadiness rules, not the interval, keep the registry from planning again at every
// log line.
const capacityInterval = time.Minute

// capacityStep is the granularity a filesystem figure of n bytes is reported at: the
// largest power of two within n/64 (between about 0.8% and 1.6% of it), at least 1 MiB.
func capacityStep(n int64) int64 {
	step := int64(1 << 20)
	for step <= n/128 {
		step *= 2
	}
	return step
}

// steadyFilesystem is the filesystem figure a site reports (cache.Capacity's
// FilesystemBytes), given the one it reported before (prev) and the one its cache reads
// now: prev while now is at or above it by less than two of prev's steps
// (capacityStep), else now rounded down to its step. So the figure never says more than
// the cache can hold, a filesystem whose other files come and go by less than a step
// sends nothing, and the registry, which plans every site again on each `site`
// section, does not do so at every log line written beside the cache.
func steadyFilesystem(prev, now int64) int64 {
	if prev > 0 && now >= prev && now-prev < 2*capacityStep(prev) {
		return prev
	}
	step := capacityStep(now)
	return now / step * step
}

// refreshCapacity reads what the cache can hold and records it, with the capacity as
// configured, in the `site` section (sent when it changed): the configured capacity, or
// the filesystem's figure held steady (steadyFilesystem) when that is less, and 1 when
// the cache can hold nothing (0 on the wire is no bound). A failed read keeps what was
// reported and is logged. It runs on watchCapacity's goroutine and on the cache's
// (cache.Config.SpaceMoved), one at a time.
func (a *agent) refreshCapacity(log *slog.Logger) {
	a.capacityMu.Lock()
	defer a.capacityMu.Unlock()
	c, err := a.cache.Capacity()
	if err != nil {
		log.Warn("cache capacity: keeping the figure reported", "err", err)
		return
	}
	a.filesystemFigure = steadyFilesystem(a.filesystemFigure, c.FilesystemBytes)
	reported := cache.Capacity{ConfiguredBytes: c.ConfiguredBytes, FilesystemBytes: a.filesystemFigure}.EffectiveBytes()
	a.reports.setCache(max(reported, 1), c.ConfiguredBytes)
}

// watchCapacity refreshes the reported capacity every capacityInterval until ctx ends.
func (a *agent) watchCapacity(ctx context.Context, log *slog.Logger) {
	for {
		t := a.clock.NewTimer(capacityInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			a.refreshCapacity(log)
		}
	}
}
