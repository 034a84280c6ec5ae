package cache

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// smallFSBytes is the size of the filesystem the tests of the disk bound fill, and
// smallFSReserve its default reserve (DefaultReserve: a quarter of so small a one).
const (
	smallFSBytes   = 64 << 20
	smallFSReserve = smallFSBytes / 4
)

// endless is an HTTPS server on loopback whose one artifact never ends: it streams
// bytes, with no Content-Length, until the client goes.
type endless struct {
	srv      *httptest.Server
	served   atomic.Int64
	requests atomic.Int64
}

func newEndless(t *testing.T) *endless {
	s := &endless{}
	piece := make([]byte, 64<<10)
	for i := range piece {
		piece[i] = byte(i * 7)
	}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		for {
			n, err := w.Write(piece)
			s.served.Add(int64(n))
			if err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// freeWatch is an Observer that reads the free space of the filesystem of dir after
// every write of a pull, and keeps the least it saw.
type freeWatch struct {
	t       *testing.T
	dir     string
	mu      sync.Mutex
	minFree int64
}

func (w *freeWatch) PullProgress(int64) {
	sp, err := fsutil.SpaceOf(w.dir)
	if err != nil {
		w.t.Error(err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.minFree < 0 || sp.Avail < w.minFree {
		w.minFree = sp.Avail
	}
}

func (w *freeWatch) leastFree() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.minFree
}

func (*freeWatch) ImageRequested(bool) {}
func (*freeWatch) PullEnded(string)    {}
func (*freeWatch) Evicted(int64)       {}

// slack is what the filesystem may dip below the reserve by: the cache counts bytes,
// the filesystem whole pages, and the index may grow a little beside the pulls.
const slack = 64 << 10

// A tenant's image of unknown size whose source never ends, pulled by a cache with no
// capacity (or one larger than its filesystem), fails with reason capacity once it
// reaches the reserve, never fills the filesystem, leaves no partial file, and a ready
// image beside it stays ready and served. Without the disk bound the pull writes until
// the filesystem is full (ENOSPC) and fails with no reason.
func TestEndlessImageKeepsTheFilesystemsReserveFree(t *testing.T) {
	for name, capacity := range map[string]int64{"no capacity": 0, "capacity past the filesystem": 1 << 40} {
		t.Run(name, func(t *testing.T) {
			fs := testkit.SmallFS(t, smallFSBytes)
			src, inf, watch := newSource(t), newEndless(t), &freeWatch{t: t, dir: fs, minFree: -1}
			cfg := src.config()
			cfg.RootCAs.AddCert(inf.srv.Certificate())
			cfg.Dir, cfg.CapacityBytes = filepath.Join(fs, "cache"), capacity
			cfg.Clock, cfg.RetryInterval, cfg.Observer = newFakeClock(), time.Hour, watch
			h := start(t, cfg)
			sized := newArtifact(97, 1<<20)
			sizedImg := image(sized, src.add("/sized.raw", sized.data))
			if err := h.c.SetDesired([]proto.CacheImage{sizedImg}); err != nil {
				t.Fatal(err)
			}
			h.waitState(sized.digest, proto.CacheReady)
			hostile := unsized(newArtifact(98, 1), inf.srv.URL+"/forever.raw")
			if err := h.c.SetDesired([]proto.CacheImage{hostile, sizedImg}); err != nil {
				t.Fatal(err)
			}
			e := h.waitState(hostile.Digest, proto.CacheFailed)
			if e.Reason != proto.ReasonCapacity {
				h.c.mu.Lock()
				t.Errorf("the endless image reports reason %q (%s), want %q", e.Reason, h.c.entries[hostile.Digest].rec.Error, proto.ReasonCapacity)
				h.c.mu.Unlock()
			}
			least := watch.leastFree()
			t.Logf("the source served %d bytes; the filesystem had %d bytes free at its least", inf.served.Load(), least)
			if least < smallFSReserve-slack {
				t.Errorf("the filesystem had %d bytes free at its least while the source served %d bytes, want at least the reserve of %d", least, inf.served.Load(), smallFSReserve)
			}
			if inf.served.Load() < smallFSBytes/2 {
				t.Errorf("the source served %d bytes: the pull stopped before the room ran out", inf.served.Load())
			}
			h.c.mu.Lock()
			failure := h.c.entries[hostile.Digest].rec.Error
			h.c.mu.Unlock()
			for _, what := range []string{"filesystem of " + cfg.Dir, "free space", "move the cache"} {
				if !strings.Contains(failure, what) {
					t.Errorf("the failure %q does not say %q", failure, what)
				}
			}
			if _, err := os.Stat(h.c.partialPath(hostile.Digest)); !os.IsNotExist(err) {
				t.Errorf("partial file: %v, want none", err)
			}
			if s, _ := h.entry(sized.digest); s.State != proto.CacheReady {
				t.Errorf("the sized image is %s, want ready", s.State)
			}
			resp := get(t, h, sized.digest, nil)
			if body, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != http.StatusOK || string(body) != string(sized.data) {
				t.Errorf("the ready image answers %d with %d bytes (%v), want 200 and its %d bytes", resp.StatusCode, len(body), err, len(sized.data))
			}
		})
	}
}

// A tenant's image registered far larger than the cache's filesystem, from a source
// that would serve every byte of it, is refused before a byte is fetched, with no
// capacity or a capacity larger than the filesystem: the source is never asked.
// Without the disk bound it is pulled until the filesystem is full.
func TestImageLargerThanTheFilesystemIsRefusedBeforeItsFirstByte(t *testing.T) {
	for name, capacity := range map[string]int64{"no capacity": 0, "capacity past the filesystem": 1 << 40} {
		t.Run(name, func(t *testing.T) {
			fs := testkit.SmallFS(t, smallFSBytes)
			inf := newEndless(t)
			cfg := Config{RootCAs: inf.srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
			cfg.Dir, cfg.CapacityBytes = filepath.Join(fs, "cache"), capacity
			cfg.Clock, cfg.RetryInterval = newFakeClock(), time.Hour
			h := start(t, cfg)
			huge := unsized(newArtifact(99, 1), inf.srv.URL+"/huge.raw")
			huge.SizeBytes = 1 << 39
			if err := h.c.SetDesired([]proto.CacheImage{huge}); err != nil {
				t.Fatal(err)
			}
			if e := h.waitState(huge.Digest, proto.CacheFailed); e.Reason != proto.ReasonCapacity {
				t.Errorf("the huge image reports reason %q, want %q", e.Reason, proto.ReasonCapacity)
			}
			if n, served := inf.requests.Load(), inf.served.Load(); n != 0 || served != 0 {
				t.Errorf("the source was asked %d times and served %d bytes, want none", n, served)
			}
			h.c.mu.Lock()
			failure := h.c.entries[huge.Digest].rec.Error
			h.c.mu.Unlock()
			if !strings.Contains(failure, "needs 549755813888 bytes and the filesystem of "+cfg.Dir) {
				t.Errorf("the failure %q does not say what the image needs and where", failure)
			}
			if _, err := os.Stat(h.c.partialPath(huge.Digest)); !os.IsNotExist(err) {
				t.Errorf("partial file: %v, want none", err)
			}
		})
	}
}

// The default reserve is 5% of the filesystem, at least 1 GiB and at most 20 GiB, and
// never more than a quarter of it.
func TestDefaultReserve(t *testing.T) {
	for _, c := range []struct{ total, want int64 }{
		{smallFSBytes, smallFSReserve},
		{2 << 30, 512 << 20},
		{10 << 30, 1 << 30},
		{100 << 30, 5 << 30},
		{1 << 40, 20 << 30},
		{100 << 40, 20 << 30},
	} {
		if got := DefaultReserve(c.total); got != c.want {
			t.Errorf("DefaultReserve(%d) = %d, want %d", c.total, got, c.want)
		}
	}
}

// When the filesystem, not the capacity, lacks room for a sized image, the cache evicts
// for it as it does under capacity pressure: a ready image no longer desired goes, and
// the new one is pulled.
func TestFilesystemPressureEvicts(t *testing.T) {
	fs := testkit.SmallFS(t, smallFSBytes)
	src := newSource(t)
	cfg := src.config()
	cfg.Dir, cfg.ReserveBytes = filepath.Join(fs, "cache"), 16<<20
	cfg.Clock, cfg.RetryInterval = newFakeClock(), time.Hour
	h := start(t, cfg)
	old, next := newArtifact(100, 28<<20), newArtifact(101, 28<<20)
	if err := h.c.SetDesired([]proto.CacheImage{image(old, src.add("/old.raw", old.data))}); err != nil {
		t.Fatal(err)
	}
	h.waitState(old.digest, proto.CacheReady)
	if err := h.c.SetDesired([]proto.CacheImage{image(next, src.add("/next.raw", next.data))}); err != nil {
		t.Fatal(err)
	}
	h.waitState(next.digest, proto.CacheReady)
	if _, ok := h.entry(old.digest); ok {
		t.Error("the image no longer desired is still held: the filesystem's bound made no room")
	}
	if err := fileHashes(h.c.readyPath(next.digest), next.digest); err != nil {
		t.Error(err)
	}
}

// A reserve that is negative, or not less than the cache's filesystem, is refused with
// INVALID_CONFIG at reserveBytes, and the cache is not opened.
func TestBadReserveIsRefused(t *testing.T) {
	for name, reserve := range map[string]int64{"negative": -1, "the whole filesystem": smallFSBytes, "past it": 1 << 50} {
		t.Run(name, func(t *testing.T) {
			dir := testkit.SmallFS(t, smallFSBytes)
			_, err := Open(Config{Dir: dir, ReserveBytes: reserve})
			pe, ok := errors.AsType[*proto.Error](err)
			if !ok || pe.Code != proto.InvalidConfig || pe.Details.Path != "reserveBytes" {
				t.Fatalf("Open with reserve %d: %v, want INVALID_CONFIG at reserveBytes", reserve, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "index.db")); !os.IsNotExist(err) {
				t.Errorf("index.db: %v, want none: a refused config changes nothing", err)
			}
		})
	}
}
