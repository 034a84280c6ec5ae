package cache

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
)

// candidate is an image as eviction sees it.
type candidate struct {
	Digest    string
	SizeBytes int64
	LastUsed  time.Time
	State     proto.ImageCacheState
	InUse     bool // a ramdisk is reading it within its pin (Cache.pinned), or a check of a source runs
	Desired   bool // the desired list names it
}

// evictionOrder picks images to free need bytes: ready ones only, never in use or
// desired, the least recently used first (never used before any used, ties by digest),
// until their sizes reach need. When all of them cannot free need, it picks none: an
// eviction that does not make room only loses images.
func evictionOrder(cands []candidate, need int64) []string {
	var ok []candidate
	for _, c := range cands {
		if c.State == proto.CacheReady && !c.InUse && !c.Desired {
			ok = append(ok, c)
		}
	}
	slices.SortFunc(ok, func(a, b candidate) int {
		if c := a.LastUsed.Compare(b.LastUsed); c != 0 {
			return c
		}
		return cmp.Compare(a.Digest, b.Digest)
	})
	var out []string
	var freed int64
	for _, c := range ok {
		if freed >= need {
			break
		}
		out = append(out, c.Digest)
		freed += c.SizeBytes
	}
	if freed < need {
		return nil
	}
	return out
}

// usedBytes is what the cache's images take or are about to take: ready and evicting
// files, a running pull's full size (a check's beside its ready file), a waiting pull's
// partial file. except is left out.
// c.mu is held.
func (c *Cache) usedBytes(except *entry) int64 {
	var n int64
	for _, e := range c.entries {
		switch {
		case e == except:
		case e.checking:
			n += 2 * e.rec.SizeBytes // the file and the check's bytes in partial/
		case e.verify || e.rec.State == proto.CacheReady || e.rec.State == proto.CacheEvicting:
			n += e.rec.SizeBytes
		case e.rec.State == proto.CachePulling && e.busy:
			n += max(e.rec.SizeBytes, e.progress.Load())
		case e.rec.State == proto.CachePulling:
			n += e.progress.Load()
		}
	}
	return n
}

// unsizedBytes is what the running pulls of images of unknown size hold, e's left out:
// room an image of known size takes from them (their next write finds no room, and they
// fail with reason capacity). c.mu is held.
func (c *Cache) unsizedBytes(except *entry) int64 {
	var n int64
	for _, e := range c.entries {
		if e != except && e.busy && !e.checking && e.rec.State == proto.CachePulling && e.rec.SizeBytes == 0 {
			n += e.progress.Load()
		}
	}
	return n
}

// pendingBytes is what the running pulls of known size and the checks have yet to
// write, e's left out: room on the filesystem they have taken and not yet used. c.mu is
// held.
func (c *Cache) pendingBytes(except *entry) int64 {
	var n int64
	for _, e := range c.entries {
		if e != except && e.busy && (e.checking || e.rec.State == proto.CachePulling) {
			n += max(e.rec.SizeBytes-e.progress.Load(), 0)
		}
	}
	return n
}

// disk is the room of a pull on the cache's filesystem, as statfs read it.
type disk struct {
	dir                    string
	room                   int64 // the bytes the pull's partial file may hold
	avail, reserve, others int64 // the free space, the reserve, what other pulls have yet to write
}

// diskRoom is the room e's partial file has by the bound of the cache's filesystem: what
// it holds already, and the filesystem's free space less the reserve and what the other
// running pulls have yet to write. e is nil for a check about to start. c.mu is held.
func (c *Cache) diskRoom(e *entry) (disk, error) {
	sp, err := fsutil.SpaceOf(c.cfg.Dir)
	if err != nil {
		return disk{}, err
	}
	d := disk{dir: c.cfg.Dir, avail: sp.Avail, reserve: c.reserve, others: c.pendingBytes(e)}
	if e != nil {
		d.room = e.progress.Load()
	}
	d.room += d.avail - d.reserve - d.others
	return d, nil
}

// full is the error of a pull that needs more than the room d: INVALID_STATE with the
// reason capacity, saying what to do.
func (d disk) full(need int64, unsized bool) error {
	what := fmt.Sprintf("the image needs %d bytes", need)
	if unsized {
		what = fmt.Sprintf("the image's size is unknown and it passes %d bytes", need)
	}
	return terminalError{proto.Errorf(proto.InvalidState, "cache full: %s and the filesystem of %s has room for %d (%d bytes free, less the reserve of %d kept for the rest of that filesystem and the %d the cache's other pulls have yet to write): free space on that filesystem, set the cache's capacity within it, or move the cache to a larger filesystem",
		what, d.dir, max(d.room, 0), d.avail, d.reserve, d.others).WithReason(proto.ReasonCapacity)}
}

// roomFor refuses, as INVALID_STATE with the reason capacity, n bytes of e's pull that do
// not fit beside what the cache keeps and its other pulls reserve: in the cache's
// capacity (an image of unknown size only: one of known size made its room before it
// started), and, when readDisk, on its filesystem less the reserve, whose room for e it
// returns. It evicts nothing. It takes c.mu.
func (c *Cache) roomFor(e *entry, n int64, unsized, readDisk bool) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.cfg.CapacityBytes - c.usedBytes(e); unsized && c.cfg.CapacityBytes > 0 && n > room {
		return 0, terminalError{proto.Errorf(proto.InvalidState, "cache full: the image's size is unknown and it passes the %d bytes the cache has room for (capacity %d, less what it keeps and its other pulls): register the image with sizeBytes, so the cache makes room for it, or raise the cache's capacity",
			max(room, 0), c.cfg.CapacityBytes).WithReason(proto.ReasonCapacity)}
	}
	if !readDisk {
		return 0, nil
	}
	d, err := c.diskRoom(e)
	if err != nil {
		return 0, err
	}
	if n > d.room {
		return 0, d.full(n, unsized)
	}
	return d.room, nil
}

// makeRoom evicts what it must so that e's pull may hold size bytes, within the capacity
// and on the filesystem less the reserve; an error of reason capacity when eviction
// cannot free enough. An image of known size counts the running pulls of unknown size
// out: it takes their room. For an image of unknown size (unsized: size is what its
// partial file holds) it evicts nothing beyond what the capacity asks. c.mu is held.
func (c *Cache) makeRoom(e *entry, size int64, unsized bool) error {
	var need int64
	if c.cfg.CapacityBytes > 0 {
		used := c.usedBytes(e)
		if !unsized {
			used -= c.unsizedBytes(e)
		}
		need = used + size - c.cfg.CapacityBytes
	}
	capNeed := need
	d, err := c.diskRoom(e)
	if err != nil {
		return err
	}
	if !unsized {
		need = max(need, size-d.room-c.unsizedBytes(e))
	}
	if need <= 0 {
		return nil
	}
	victims := evictionOrder(c.candidates(), need)
	if victims == nil {
		if need > capNeed {
			return d.full(size, false)
		}
		return proto.Errorf(proto.InvalidState, "cache full: %d bytes do not fit in %d, even after evicting every unpinned, unused image no longer desired",
			size, c.cfg.CapacityBytes-c.usedBytes(e)).WithReason(proto.ReasonCapacity)
	}
	var cut bool
	for _, d := range victims {
		cut = !c.evictOrCut(c.entries[d]) || cut
	}
	if cut {
		return errReadersCut
	}
	return nil
}

// errReadersCut is makeRoom's word for room that frees once the readers it cut are
// gone: the pull waits for the scheduler's next look, not failed.
var errReadersCut = errors.New("cache: waiting for the readers cut to end")

// evictOrCut evicts e, or, while responses still read it (their pin lapsed, or it would
// not be a candidate), cuts them and says false: the file goes once they are gone.
// c.mu is held.
func (c *Cache) evictOrCut(e *entry) bool {
	if len(e.readers) > 0 {
		c.cut(e)
		return false
	}
	c.evict(e)
	return true
}

// evictOverCapacity evicts what it can when the cache holds more than its capacity (the
// capacity was lowered). c.mu is held.
func (c *Cache) evictOverCapacity() {
	if c.cfg.CapacityBytes <= 0 {
		return
	}
	over := c.usedBytes(nil) - c.cfg.CapacityBytes
	if over <= 0 {
		return
	}
	cands := c.candidates()
	for over > 0 {
		victims := evictionOrder(cands, 1)
		if victims == nil {
			return
		}
		e := c.entries[victims[0]]
		over -= e.rec.SizeBytes
		c.evictOrCut(e)
		cands = slices.DeleteFunc(cands, func(x candidate) bool { return x.Digest == victims[0] })
	}
}

func (c *Cache) candidates() []candidate {
	out := make([]candidate, 0, len(c.entries))
	now := c.cfg.Clock.Now()
	for d, e := range c.entries {
		st := e.rec.State
		if e.verify {
			st = proto.CachePulling
		}
		out = append(out, candidate{Digest: d, SizeBytes: e.rec.SizeBytes, LastUsed: e.rec.LastUsed, State: st,
			InUse: c.pinned(e, now) || e.checking, Desired: c.wanted[d]})
	}
	return out
}

// evict removes a ready image no response reads (evictOrCut): the index says evicting
// first (so a crash finishes the job at start-up), then the file goes, then the record.
// c.mu is held; no reader can start on the image once it is evicting.
func (c *Cache) evict(e *entry) {
	d := e.rec.Digest
	e.rec.State = proto.CacheEvicting
	if err := c.idx.put(e.rec); err != nil {
		c.cfg.Logger.Error("cache: evict", "digest", d, "err", err)
		return
	}
	c.notify()
	if err := removeFile(c.readyPath(d)); err != nil {
		c.cfg.Logger.Error("cache: evict", "digest", d, "err", err)
		return
	}
	c.spaceMoved = true // told with the notify above: the report waits for c.mu
	if err := c.idx.remove(d); err != nil {
		c.cfg.Logger.Error("cache: evict", "digest", d, "err", err)
		return
	}
	delete(c.entries, d)
	delete(c.dirty, d)
	c.cfg.Logger.Info("cache: evicted", "digest", d, "bytes", e.rec.SizeBytes)
	if c.cfg.Observer != nil {
		c.cfg.Observer.Evicted(e.rec.SizeBytes)
	}
}
