package cache

import (
	"fmt"
	"os"
	"path/filepath"
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
