package cache

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// A cache with no capacity on a real 64 MiB filesystem can hold that filesystem less its
// reserve (less what the index and the filesystem's own pages take, within slack); a
// pull moves bytes from the free space to the cache and leaves the figure as it was; a
// file written beside the cache takes its size from it. A capacity past the filesystem
// is bounded by it (another cache's image on it included); one within it is what the
// cache can hold.
func TestCapacityIsWhatTheFilesystemLetsTheCacheHold(t *testing.T) {
	const room = smallFSBytes - smallFSReserve
	fs := testkit.SmallFS(t, smallFSBytes)
	src := newSource(t)
	cfg := src.config()
	cfg.Dir, cfg.Clock, cfg.RetryInterval = filepath.Join(fs, "cache"), newFakeClock(), time.Hour
	h := start(t, cfg)
	capacity := func() Capacity {
		t.Helper()
		c, err := h.c.Capacity()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	empty := capacity()
	if empty.ConfiguredBytes != 0 || empty.FilesystemBytes > room || empty.FilesystemBytes < room-slack || empty.EffectiveBytes() != empty.FilesystemBytes {
		t.Fatalf("an empty cache with no capacity on a %d byte filesystem reports %+v (effective %d), want its %d bytes less the reserve of %d, within %d",
			smallFSBytes, empty, empty.EffectiveBytes(), room, smallFSReserve, slack)
	}

	img := newArtifact(200, 20<<20)
	if err := h.c.SetDesired([]proto.CacheImage{image(img, src.add("/img.raw", img.data))}); err != nil {
		t.Fatal(err)
	}
	h.waitState(img.digest, proto.CacheReady)
	if held := capacity(); held.FilesystemBytes < empty.FilesystemBytes-slack || held.FilesystemBytes > empty.FilesystemBytes+slack {
		t.Errorf("holding a %d byte image the cache reports %d, want the %d it reported empty, within %d: a pull only moves bytes into the cache",
			len(img.data), held.FilesystemBytes, empty.FilesystemBytes, slack)
	}

	const other = 8 << 20
	if err := os.WriteFile(filepath.Join(fs, "other.log"), make([]byte, other), 0o600); err != nil {
		t.Fatal(err)
	}
	if beside := capacity(); beside.FilesystemBytes > empty.FilesystemBytes-other || beside.FilesystemBytes < empty.FilesystemBytes-other-slack {
		t.Errorf("with a %d byte file beside it the cache reports %d, want %d less that file", other, beside.FilesystemBytes, empty.FilesystemBytes)
	}

	for _, configured := range []int64{1 << 40, 10 << 20} {
		cfg := cfg
		cfg.Dir, cfg.CapacityBytes = filepath.Join(fs, fmt.Sprint("capped-", configured)), configured
		got, err := start(t, cfg).c.Capacity()
		want := min(configured, empty.FilesystemBytes-int64(len(img.data))-other) // the first cache's image is not this one's
		if err != nil || got.ConfiguredBytes != configured || got.EffectiveBytes() > want || got.EffectiveBytes() < want-slack {
			t.Errorf("a cache of capacity %d on the filesystem reports %+v (effective %d), %v: want about %d", configured, got, got.EffectiveBytes(), err, want)
		}
	}
}

// SpaceMoved is told, before the Reporter hears of it, of a pull that ended ready, of one
// refused for capacity and of an eviction, and of nothing else: a pull that failed
// otherwise (the source answered 404) moves no room and tells nothing.
func TestSpaceMovedIsToldBeforeTheReport(t *testing.T) {
	const size = 256 << 10
	src := newSource(t)
	cfg := src.config()
	cfg.Clock, cfg.RetryInterval, cfg.CapacityBytes = newFakeClock(), time.Hour, 3*size/2
	var mu sync.Mutex
	var moved int
	var seen []movedReport // each report, with the SpaceMoved calls before it
	cfg.SpaceMoved = func() { mu.Lock(); moved++; mu.Unlock() }
	cfg.Reporter = ReporterFunc(func(e []proto.ImageCacheEntry) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, movedReport{moved, e})
	})
	h := start(t, cfg)
	a, b := newArtifact(50, size), newArtifact(51, size)
	imgA, imgB := image(a, src.add("/a", a.data)), image(b, src.add("/b", b.data))
	missing := image(newArtifact(52, 1<<10), src.srv.URL+"/missing") // within the capacity beside a

	// movedBy waits for the first report since the desired list was set to list where st
	// holds, and returns the SpaceMoved calls told before it.
	movedBy := func(list []proto.CacheImage, what string, st func(map[string]proto.ImageCacheEntry) bool) int {
		t.Helper()
		mu.Lock()
		from := len(seen)
		mu.Unlock()
		if err := h.c.SetDesired(list); err != nil {
			t.Fatal(err)
		}
		var n int
		waitFor(t, what, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range seen[from:] {
				by := map[string]proto.ImageCacheEntry{}
				for _, e := range r.entries {
					by[e.Digest] = e
				}
				if st(by) {
					n = r.moved
					return true
				}
			}
			return false
		})
		return n
	}
	ready := movedBy([]proto.CacheImage{imgA}, "a ready", func(m map[string]proto.ImageCacheEntry) bool { return m[a.digest].State == proto.CacheReady })
	if ready != 1 {
		t.Errorf("SpaceMoved told %d times before the report of a pull ended ready, want 1", ready)
	}
	if n := movedBy([]proto.CacheImage{imgA, missing}, "the missing image failed", func(m map[string]proto.ImageCacheEntry) bool {
		return m[missing.Digest].State == proto.CacheFailed && m[missing.Digest].Reason == ""
	}); n != ready {
		t.Errorf("a pull failed on a 404 told SpaceMoved (%d times in all, %d before it): want nothing told", n, ready)
	}
	refused := movedBy([]proto.CacheImage{imgA, imgB}, "b refused for capacity", func(m map[string]proto.ImageCacheEntry) bool {
		return m[b.digest].State == proto.CacheFailed && m[b.digest].Reason == proto.ReasonCapacity
	})
	if refused != ready+1 {
		t.Errorf("SpaceMoved told %d times before the report of a pull refused for capacity, want %d", refused, ready+1)
	}
	if evicted := movedBy([]proto.CacheImage{imgB}, "a evicted", func(m map[string]proto.ImageCacheEntry) bool { _, ok := m[a.digest]; return !ok }); evicted <= refused {
		t.Errorf("SpaceMoved told %d times before the report of an eviction, want more than the %d before it", evicted, refused)
	}
}

// movedReport is a report the Reporter was told, and the SpaceMoved calls before it.
type movedReport struct {
	moved   int
	entries []proto.ImageCacheEntry
}
