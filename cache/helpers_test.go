package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// newFakeClock is the clock tests move by hand.
func newFakeClock() *clock.Fake {
	return clock.NewFake(time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC))
}

// artifact is test image bytes and their digest.
type artifact struct {
	data   []byte
	digest string
}

func newArtifact(seed uint64, size int) artifact {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	sum := sha256.Sum256(b)
	return artifact{b, hex.EncodeToString(sum[:])}
}

// source is an HTTPS server on loopback that serves artifacts by path, with knobs for
// the failures a pull must survive.
type source struct {
	srv *httptest.Server

	mu        sync.Mutex
	files     map[string][]byte
	requests  []http.Header // each request's headers, in order
	breakAt   []int64       // cut the n-th response's body after this many bytes (-1: no)
	noRange   bool          // ignore Range, always answer 200
	noETag    bool          // send no ETag
	served    atomic.Int64  // body bytes written
	inFlight  atomic.Int32
	maxFlight atomic.Int32
	delay     time.Duration // hold each response this long before its body
}

func newSource(t testing.TB) *source {
	s := &source{files: map[string][]byte{}}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *source) add(path string, b []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[path] = b
	return s.srv.URL + path
}

func (s *source) serve(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxFlight.Load()
		if n <= m || s.maxFlight.CompareAndSwap(m, n) {
			break
		}
	}
	s.mu.Lock()
	b, ok := s.files[r.URL.Path]
	i := len(s.requests)
	s.requests = append(s.requests, r.Header.Clone())
	cut := int64(-1)
	if i < len(s.breakAt) {
		cut = s.breakAt[i]
	}
	noRange, noETag, delay := s.noRange, s.noETag, s.delay
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	if noRange {
		r.Header.Del("Range")
	}
	if !noETag {
		sum := sha256.Sum256(b)
		w.Header().Set("ETag", `"v1-`+hex.EncodeToString(sum[:4])+`"`)
	}
	cw := &countingWriter{ResponseWriter: w, n: &s.served, cut: cut}
	http.ServeContent(cw, r, "", time.Time{}, strings.NewReader(string(b)))
}

func (s *source) headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.requests...)
}

// countingWriter counts body bytes and aborts the connection after cut of them.
type countingWriter struct {
	http.ResponseWriter
	n       *atomic.Int64
	cut     int64
	written int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.cut >= 0 && c.written+int64(len(b)) > c.cut {
		b = b[:c.cut-c.written]
		k, _ := c.ResponseWriter.Write(b)
		c.n.Add(int64(k))
		c.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection is cut mid-body
	}
	k, err := c.ResponseWriter.Write(b)
	c.written += int64(k)
	c.n.Add(int64(k))
	return k, err
}

// harness is a cache opened in a temporary directory and running.
type harness struct {
	t       testing.TB
	c       *Cache
	cfg     Config
	cancel  context.CancelFunc
	done    chan error
	reports *reports
}

// reports records what the Reporter was told.
type reports struct {
	mu   sync.Mutex
	last []proto.ImageCacheEntry
}

func (r *reports) ReportImages(e []proto.ImageCacheEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = e
}

func (r *reports) latest() []proto.ImageCacheEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// start opens and runs a cache with cfg (Dir defaults to a temporary directory).
func start(t testing.TB, cfg Config) *harness {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	rep := &reports{}
	if cfg.Reporter == nil {
		cfg.Reporter = rep
	}
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, c: c, cfg: cfg, cancel: cancel, done: make(chan error, 1), reports: rep}
	go func() { h.done <- c.Run(ctx) }()
	t.Cleanup(h.stop)
	return h
}

// stop ends Run and closes the cache; a second call does nothing.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	<-h.done
	h.cancel = nil
	if err := h.c.Close(); err != nil {
		h.t.Error(err)
	}
}

// entry returns the cache's inventory entry for d.
func (h *harness) entry(d string) (proto.ImageCacheEntry, bool) {
	for _, e := range h.c.Entries() {
		if e.Digest == d {
			return e, true
		}
	}
	return proto.ImageCacheEntry{}, false
}

// waitState waits until d is in state st (failing after a generous deadline).
func (h *harness) waitState(d string, st proto.ImageCacheState) proto.ImageCacheEntry {
	h.t.Helper()
	var e proto.ImageCacheEntry
	waitFor(h.t, fmt.Sprintf("%s to be %s", d[:12], st), func() bool {
		var ok bool
		e, ok = h.entry(d)
		return ok && e.State == st
	})
	return e
}

// waitFor polls cond; the deadline only keeps a broken test from hanging.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, what, 60*time.Second, 5*time.Millisecond, cond)
}

// image is the desired-list entry for an artifact served at url.
func image(a artifact, url string) proto.CacheImage {
	return proto.CacheImage{Ref: "img@1", Digest: a.digest, Source: url, SizeBytes: int64(len(a.data)), Format: proto.FormatRaw, Compression: proto.CompressionNone}
}

// tlsConfig is a Config trusting the test source's certificate.
func (s *source) config() Config {
	pool := s.srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	return Config{RootCAs: pool}
}

type atomicDuration struct {
	mu sync.Mutex
	d  time.Duration
}

func (a *atomicDuration) max(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.d = max(a.d, d)
}

func (a *atomicDuration) get() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.d
}

func hexPrefix(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:4])
}

// fileHashes says whether the file at path hashes to digest.
func fileHashes(path, digest string) error {
	_, err := hashFile(context.Background(), path, digest)
	return err
}

// get GETs an image from the cache's handler on a loopback server.
func get(t *testing.T, h *harness, digest string, hdr http.Header) *http.Response {
	t.Helper()
	srv := httptest.NewServer(h.c.Handler())
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+ImagePathPrefix+digest, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sortEntries(e []proto.ImageCacheEntry) {
	slices.SortFunc(e, func(a, b proto.ImageCacheEntry) int { return strings.Compare(a.Digest, b.Digest) })
}
