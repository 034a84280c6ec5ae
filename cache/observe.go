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
