package cache

import (
	"slices"

	"github.com/better-compute/better-compute/proto"
)

// Pin keeps digest from eviction on behalf of holder (a deploy's id) until that holder
// unpins it. Pins are kept in the index across restarts. Pinning an image the cache does
// not hold is NOT_FOUND.
func (c *Cache) Pin(digest, holder string) error {
	if holder == "" {
		return proto.Errorf(proto.InvalidInput, "pin holder is empty").WithPath("holder")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[digest]
	if e == nil {
		return proto.Errorf(proto.NotFound, "image sha256:%s is not in this cache", digest)
	}
	i, found := slices.BinarySearch(e.rec.Pins, holder)
	if found {
		return nil
	}
	e.rec.Pins = slices.Insert(e.rec.Pins, i, holder)
	if err := c.idx.put(e.rec); err != nil {
		return proto.Errorf(proto.Internal, "write cache index: %w", err)
	}
	return nil
}

// Unpin drops holder's pin on digest. Unpinning what is not pinned is no error.
func (c *Cache) Unpin(digest, holder string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[digest]
	if e == nil {
		return nil
	}
	i, found := slices.BinarySearch(e.rec.Pins, holder)
	if !found {
		return nil
	}
	e.rec.Pins = slices.Delete(e.rec.Pins, i, i+1)
	if len(e.rec.Pins) == 0 {
		e.rec.Pins = nil
	}
	defer c.kick()
	if err := c.idx.put(e.rec); err != nil {
		return proto.Errorf(proto.Internal, "write cache index: %w", err)
	}
	return nil
}
