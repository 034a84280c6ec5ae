package cache

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestPullCompletes(t *testing.T) {
	src := newSource(t)
	a := newArtifact(1, 3<<20+17)
	url := src.add("/images/a.raw", a.data)
	h := start(t, src.config())
	if err := h.c.SetDesired([]proto.CacheImage{image(a, url)}); err != nil {
		t.Fatal(err)
	}
	h.waitState(a.digest, proto.CacheReady)
	got, err := os.ReadFile(filepath.Join(h.cfg.Dir, "sha256", a.digest))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, a.data) {
		t.Fatal("the ready file differs from the artifact")
	}
	if left, _ := os.ReadDir(filepath.Join(h.cfg.Dir, "partial")); len(left) != 0 {
		t.Errorf("partial/ still holds %d files", len(left))
	}
	want := []proto.ImageCacheEntry{{Digest: a.digest, State: proto.CacheReady, SizeBytes: int64(len(a.data)), Sources: []string{url}}}
	waitFor(t, "the report of the ready image", func() bool { return cmp.Equal(h.reports.latest(), want) })
	if served := src.served.Load(); served != int64(len(a.data)) {
		t.Errorf("the source served %d bytes, want %d", served, len(a.data))
	}
}

func TestPullResumesAfterBrokenConnection(t *testing.T) {
	src := newSource(t)
	a := newArtifact(2, 4<<20)
	url := src.add("/a", a.data)
	src.breakAt = []int64{1<<20 + 5, 1 << 20} // each counted in its own response
	h := start(t, src.config())
	if err := h.c.SetDesired([]proto.CacheImage{image(a, url)}); err != nil {
		t.Fatal(err)
	}
	h.waitState(a.digest, proto.CacheReady)
	hs := src.headers()
	if len(hs) != 3 {
		t.Fatalf("the source got %d requests, want 3 (one, then two resumes)", len(hs))
	}
	var got []string
	for _, hd := range hs {
		got = append(got, hd.Get("Range")+" | "+hd.Get("If-Range"))
	}
	wantETag := `"v1-` + hexPrefix(a.data) + `"`
	want := []string{" | ", "bytes=1048581- | " + wantETag, "bytes=2097157- | " + wantETag}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests' Range | If-Range (-want +got):\n%s", diff)
	}
	if served := src.served.Load(); served != int64(len(a.data)) {
		t.Errorf("the source served %d bytes, want exactly the artifact's %d", served, len(a.data))
	}
	if err := fileHashes(filepath.Join(h.cfg.Dir, "sha256", a.digest), a.digest); err != nil {
		t.Error(err)
	}
}

func TestServerIgnoringRangeRestartsFromZero(t *testing.T) {
	src := newSource(t)
	a := newArtifact(3, 2<<20)
	url := src.add("/a", a.data)
	src.breakAt = []int64{700 << 10}
	src.noRange = true
	h := start(t, src.config())
	if err := h.c.SetDesired([]proto.CacheImage{image(a, url)}); err != nil {
		t.Fatal(err)
	}
	h.waitState(a.digest, proto.CacheReady)
	if served, want := src.served.Load(), int64(700<<10+len(a.data)); served != want {
		t.Errorf("the source served %d bytes, want %d (the cut part, then all of it)", served, want)
	}
	if got := src.headers()[1].Get("Range"); got != "bytes=716800-" {
		t.Errorf("second request's Range = %q, want a resume", got)
	}
	if err := fileHashes(filepath.Join(h.cfg.Dir, "sha256", a.digest), a.digest); err != nil {
		t.Error(err)
	}
}

func TestWrongDigestNeverBecomesVisible(t *testing.T) {
	src := newSource(t)
	a := newArtifact(4, 1<<20)
	other := newArtifact(5, 1<<20)
	url := src.add("/a", other.data) // the source serves other bytes
	clock := newFakeClock()
	cfg := src.config()
	cfg.Clock = clock
	h := start(t, cfg)
	// Watch the ready directory the whole time the pull runs.
	seen := make(chan string, 1)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				close(seen)
				return
			default:
			}
			if des, _ := os.ReadDir(filepath.Join(h.cfg.Dir, "sha256")); len(des) > 0 {
				seen <- des[0].Name()
				return
			}
		}
	}()
	if err := h.c.SetDesired([]proto.CacheImage{image(a, url)}); err != nil {
		t.Fatal(err)
	}
	e := h.waitState(a.digest, proto.CacheFailed)
	close(stop)
	if name, ok := <-seen; ok {
		t.Fatalf("sha256/%s appeared", name)
	}
	if left, _ := os.ReadDir(filepath.Join(h.cfg.Dir, "partial")); len(left) != 0 {
		t.Errorf("partial/ still holds %d files", len(left))
	}
	want := proto.ImageCacheEntry{Digest: a.digest, State: proto.CacheFailed, Sources: []string{url}}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Errorf("entry (-want +got):\n%s", diff)
	}
	h.c.mu.Lock()
	msg := h.c.entries[a.digest].rec.Error
	h.c.mu.Unlock()
	if !strings.Contains(msg, "digest mismatch") || !strings.Contains(msg, other.digest) {
		t.Errorf("error = %q, want a digest mismatch naming %s", msg, other.digest)
	}
	resp := get(t, h, a.digest, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET of the failed image = %s, want 404", resp.Status)
	}

	// After the retry interval the source has the right bytes: the image becomes ready.
	src.add("/a", a.data)
	clock.Advance(DefaultRetryInterval)
	h.waitState(a.digest, proto.CacheReady)
}

func TestPullFailures(t *testing.T) {
	a := newArtifact(6, 64<<10)
	for name, tc := range map[string]struct {
		serve   func(src *source) string
		wantErr string
	}{
		"not found": {
			serve:   func(src *source) string { return src.srv.URL + "/missing" },
			wantErr: "404",
		},
		"larger than the catalog says": {
			serve:   func(src *source) string { return src.add("/big", append(bytes.Clone(a.data), 1)) },
			wantErr: "the source has 65537 bytes, the catalog says 65536",
		},
		"oci digest differs": {
			serve: func(src *source) string {
				return "oci://" + strings.TrimPrefix(src.srv.URL, "https://") + "/r@sha256:" + strings.Repeat("0", 64)
			},
			wantErr: "oci source names blob",
		},
	} {
		t.Run(name, func(t *testing.T) {
			src := newSource(t)
			h := start(t, src.config())
			h.c.SetDesired([]proto.CacheImage{image(a, tc.serve(src))})
			h.waitState(a.digest, proto.CacheFailed)
			h.c.mu.Lock()
			msg := h.c.entries[a.digest].rec.Error
			h.c.mu.Unlock()
			if !strings.Contains(msg, tc.wantErr) {
				t.Errorf("error = %q, want it to say %q", msg, tc.wantErr)
			}
		})
	}
}

func TestConcurrencyBound(t *testing.T) {
	src := newSource(t)
	src.delay = 20 * time.Millisecond // each response is held so that pulls overlap
	cfg := src.config()
	cfg.MaxPulls = 2
	h := start(t, cfg)
	var list []proto.CacheImage
	for i := range 6 {
		a := newArtifact(uint64(10+i), 128<<10)
		list = append(list, image(a, src.add("/"+a.digest, a.data)))
	}
	if err := h.c.SetDesired(list); err != nil {
		t.Fatal(err)
	}
	for _, img := range list {
		h.waitState(img.Digest, proto.CacheReady)
	}
	if m := src.maxFlight.Load(); m > 2 || m < 1 {
		t.Errorf("at most %d requests ran at once, want 1 or 2", m)
	}
}

// frozenClock never moves; After fires at once and remembers the longest wait asked.
type frozenClock struct {
	*clock.Fake
	longest atomicDuration
}

func (f *frozenClock) After(d time.Duration) <-chan time.Time {
	f.longest.max(d)
	ch := make(chan time.Time, 1)
	ch <- f.Now()
	return ch
}

func TestBandwidthIsSharedByAllPulls(t *testing.T) {
	// With time frozen, every byte taken from the shared bucket is debt: the last wait
	// asked for is (all bytes of all pulls - burst) / rate. Separate buckets per pull
	// would ask for (one pull's bytes - burst) / rate at most.
	src := newSource(t)
	clock := &frozenClock{Fake: newFakeClock()}
	cfg := src.config()
	cfg.Clock = clock
	cfg.MaxPulls = 3
	cfg.BandwidthBytesPerSec = 1 << 20
	h := start(t, cfg)
	var list []proto.CacheImage
	var total int64
	for i := range 3 {
		a := newArtifact(uint64(20+i), 1<<20)
		list = append(list, image(a, src.add("/"+a.digest, a.data)))
		total += int64(len(a.data))
	}
	h.c.SetDesired(list)
	for _, img := range list {
		h.waitState(img.Digest, proto.CacheReady)
	}
	burst := int64(copyChunk)
	want := time.Duration(float64(total-burst) / float64(cfg.BandwidthBytesPerSec) * float64(time.Second))
	if got := clock.longest.get(); got < want-time.Millisecond || got > want+time.Millisecond {
		t.Errorf("longest wait %v, want %v: the pulls do not share one bucket", got, want)
	}
}

// A server that labels a compressed artifact with Content-Encoding must not have it
// decompressed on the way: the digest is of the bytes as stored.
func TestContentEncodingIsNotUndone(t *testing.T) {
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write(newArtifact(7, 64<<10).data)
	zw.Close()
	sum := sha256.Sum256(zipped.Bytes())
	a := artifact{zipped.Bytes(), hex.EncodeToString(sum[:])}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(a.data)
	}))
	t.Cleanup(srv.Close)
	h := start(t, Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs})
	h.c.SetDesired([]proto.CacheImage{image(a, srv.URL+"/a.raw.gz")})
	h.waitState(a.digest, proto.CacheReady)
}
