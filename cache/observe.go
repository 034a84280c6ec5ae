package cache

// Observer is told of what the cache serves and does: bcd site's metrics. Its methods
// are called on the cache's goroutines, some with the cache's lock held, and must
// return quickly.
type Observer interface {
	// ImageRequested is a GET or HEAD of an image: ready here (a hit) or not.
	ImageRequested(hit bool)
	// PullProgress is bytes a pull wrote to its partial file.
	PullProgress(bytes int64)
	// PullEnded is a pull that ended: "ready", "failed", or "stopped" (the image left
	// the desired list, or the cache is stopping).
	PullEnded(outcome string)
	// Evicted is a ready image evicted, and its size.
	Evicted(bytes int64)
}

// Usage is what the cache holds now, for monitoring.
type Usage struct {
	// UsedBytes are those of ready and evicting images and pulls (usedBytes), out of
	// CapacityBytes (0: no bound).
	UsedBytes, CapacityBytes int64
	// Pulling counts the pulls running.
	Pulling int
}

// Usage returns what the cache holds now.
func (c *Cache) Usage() Usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Usage{UsedBytes: c.usedBytes(nil), CapacityBytes: c.cfg.CapacityBytes, Pulling: c.running}
}

// Capacity is what the cache can hold, by its configured capacity and by its filesystem.
type Capacity struct {
	// ConfiguredBytes is Config.CapacityBytes: 0 is no bound.
	ConfiguredBytes int64
	// FilesystemBytes is what the cache's filesystem lets it hold: the bytes its images
	// and pulls take there now and the filesystem's free space, less the reserve and what
	// the running pulls have yet to write beyond the former (at least 0). Pulls and
	// evictions move bytes between the two and leave it as it is, but for the blocks
	// and metadata a file takes beyond its size; it moves as the rest of the filesystem
	// (logs, other files) grows or shrinks, which a pull is often the first to find
	// (Config.SpaceMoved).
	FilesystemBytes int64
}

// EffectiveBytes is what the cache can hold: FilesystemBytes, or ConfiguredBytes when
// that is less.
func (c Capacity) EffectiveBytes() int64 {
	if c.ConfiguredBytes > 0 {
		return min(c.ConfiguredBytes, c.FilesystemBytes)
	}
	return c.FilesystemBytes
}

// Capacity reads the free space of the cache's filesystem (one statfs) and returns what
// the cache can hold now.
func (c *Cache) Capacity() (Capacity, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, err := c.diskRoom(nil)
	if err != nil {
		return Capacity{}, err
	}
	return Capacity{ConfiguredBytes: c.cfg.CapacityBytes, FilesystemBytes: max(c.usedBytes(nil)+d.room, 0)}, nil
}
