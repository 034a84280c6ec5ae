package deploy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/fetch"
	"github.com/better-compute/better-compute/fetch/fetchtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/ramdisk/disk"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// diskImage is n bytes like an OS image: runs of text-like data, repeated chunks and
// zeros (about 40%), in runs of 4 KiB to 1 MiB.
func diskImage(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 9))
	words := strings.Fields("the quick brown fox jumps over a lazy dog kernel module firmware " +
		"initramfs partition systemd network bcd image cluster sector block device")
	b := make([]byte, 0, n)
	for len(b) < n {
		run := min(n-len(b), 4096*(1+r.IntN(256)))
		switch k := r.IntN(10); {
		case k < 4:
			b = append(b, make([]byte, run)...)
		case k < 7:
			for end := len(b) + run; len(b) < end; {
				w := words[r.IntN(len(words))]
				b = append(b, w[:min(len(w), end-len(b))]...)
				if len(b) < end {
					b = append(b, ' ')
				}
			}
		default:
			start := len(b)
			for range run {
				b = append(b, byte(r.Uint32()))
				if len(b)-start == 512 {
					break
				}
			}
			for len(b) < start+run {
				b = append(b, b[start:min(start+512, start+run-(len(b)-start))]...)
			}
		}
	}
	return b[:n]
}

func compress(t testing.TB, raw []byte, c proto.Compression) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch c {
	case proto.CompressionNone:
		return raw
	case proto.CompressionZstd:
		w, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			t.Fatal(err)
		}
		w.Write(raw)
		w.Close()
	case proto.CompressionGzip:
		w, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		w.Write(raw)
		w.Close()
	}
	return buf.Bytes()
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fileDigest is the sha256 of what path holds.
func fileDigest(t testing.TB, path string) string {
	t.Helper()
	return prefixDigest(t, path, -1)
}

// prefixDigest is the sha256 of the first n bytes of path, which must all be there, or
// of all it holds for a negative n.
func prefixDigest(t testing.TB, path string, n int64) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if n < 0 {
		_, err = io.Copy(h, f)
	} else {
		_, err = io.CopyN(h, f, n)
	}
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// qcow2Of converts raw to qcow2 with qemu-img, or skips the test.
func qcow2Of(t testing.TB, raw []byte, args ...string) []byte {
	t.Helper()
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Skip("qemu-img is not installed (make deps installs qemu-utils)")
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.raw"), filepath.Join(dir, "out.qcow2")
	if err := os.WriteFile(in, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(qemuImg, append(append([]string{"convert", "-f", "raw", "-O", "qcow2"}, args...), in, out)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// emptyDisk is a new empty file to deploy onto.
func emptyDisk(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var fast = Options{Fetch: fetch.StreamOptions{RetryDelay: -1}}

func TestImageFormats(t *testing.T) {
	raw := diskImage(24<<20+512, 1)
	cases := map[string]struct {
		format      proto.ImageFormat
		compression proto.Compression
	}{
		"raw":        {proto.FormatRaw, proto.CompressionNone},
		"raw zstd":   {proto.FormatRaw, proto.CompressionZstd},
		"raw gzip":   {proto.FormatRaw, proto.CompressionGzip},
		"qcow2":      {proto.FormatQcow2, proto.CompressionNone},
		"qcow2 zstd": {proto.FormatQcow2, proto.CompressionZstd},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			artifact := raw
			if tc.format == proto.FormatQcow2 {
				artifact = qcow2Of(t, raw)
			}
			artifact = compress(t, artifact, tc.compression)
			s := fetchtest.New(t)
			target := emptyDisk(t)
			var last Progress
			opts := fast
			opts.Progress = func(p Progress) { last = p }
			res, err := Image(context.Background(), Input{SourceURL: s.Put("/img", artifact), Digest: digest(artifact),
				Format: tc.format, Compression: tc.compression, SizeBytes: int64(len(artifact)), Target: target}, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := fileDigest(t, target); got != digest(raw) {
				t.Fatal("the target does not hold the image")
			}
			want := Result{Location: "source", Digest: digest(artifact), ImageBytes: int64(len(raw)), Read: int64(len(artifact)),
				Written: res.Written, Skipped: res.Skipped, ZeroesKnown: true}
			if diff := cmp.Diff(want, res); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if res.Skipped == 0 || res.Written+res.Skipped != int64(len(raw)) {
				t.Errorf("written %d + skipped %d, want some skipped and %d in all", res.Written, res.Skipped, len(raw))
			}
			if last.Written != res.Written || last.Read != int64(len(artifact)) || last.Total != int64(len(artifact)) {
				t.Errorf("last progress %+v for result %+v", last, res)
			}
			// Image leaves no connection open behind it (an idle one per deploy or retry
			// would stay with the site's cache until the server closes it).
			testkit.WaitFor(t, "the deploy's connections closed", 10*time.Second, 10*time.Millisecond,
				func() bool { return s.OpenConns() == 0 })
		})
	}
}

func TestImageFailures(t *testing.T) {
	raw := diskImage(6<<20, 2)
	art := compress(t, raw, proto.CompressionZstd)
	cases := map[string]struct {
		input      func(s *fetchtest.Server) Input
		wantCode   proto.Code
		wantReason string
		wiped      bool
	}{
		"wrong digest": {func(s *fetchtest.Server) Input {
			return Input{SourceURL: s.Put("/img", art), Digest: digest([]byte("other")), Format: proto.FormatRaw, Compression: proto.CompressionZstd}
		}, proto.DriverError, proto.ReasonDigestMismatch, true},
		"nowhere to be found": {func(s *fetchtest.Server) Input {
			return Input{CacheURL: s.URL + "/no", SourceURL: s.URL + "/nope", Digest: digest(art), Format: proto.FormatRaw, Compression: proto.CompressionZstd}
		}, proto.DriverError, proto.ReasonImageUnavailable, false},
		// The registry sends no source when the site's image sources do not allow it: the
		// cache alone is tried.
		"not in the cache, no source": {func(s *fetchtest.Server) Input {
			return Input{CacheURL: s.URL + "/no", Digest: digest(art), Format: proto.FormatRaw, Compression: proto.CompressionZstd}
		}, proto.DriverError, proto.ReasonImageUnavailable, false},
		"no location": {func(s *fetchtest.Server) Input {
			return Input{Digest: digest(art), Format: proto.FormatRaw, Compression: proto.CompressionZstd}
		}, proto.InvalidInput, "", false},
		"not zstd": {func(s *fetchtest.Server) Input {
			return Input{SourceURL: s.Put("/img", raw), Digest: digest(raw), Format: proto.FormatRaw, Compression: proto.CompressionZstd}
		}, proto.DriverError, proto.ReasonImageCorrupt, true},
		"compressed qcow2 clusters": {func(s *fetchtest.Server) Input {
			img := qcow2Of(t, raw, "-c")
			return Input{SourceURL: s.Put("/img", img), Digest: digest(img), Format: proto.FormatQcow2, Compression: proto.CompressionNone}
		}, proto.Unsupported, "", true},
		"an iso": {func(s *fetchtest.Server) Input {
			return Input{SourceURL: s.Put("/img", art), Digest: digest(art), Format: proto.FormatISO, Compression: proto.CompressionNone}
		}, proto.InvalidInput, "", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := fetchtest.New(t)
			in := tc.input(s)
			in.Target = emptyDisk(t)
			old := bytes.Repeat([]byte{0xaa}, 4<<20)
			if err := os.WriteFile(in.Target, old, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Image(context.Background(), in, fast)
			e := proto.AsError(err)
			if e.Code != tc.wantCode || e.Details.Reason != tc.wantReason {
				t.Fatalf("error %v (reason %q), want %s with reason %q", err, e.Details.Reason, tc.wantCode, tc.wantReason)
			}
			got, _ := os.ReadFile(in.Target)
			if !tc.wiped {
				if !bytes.Equal(got, old) {
					t.Fatal("a failure before any write changed the disk")
				}
				return
			}
			checkWiped(t, got)
		})
	}
}

// checkWiped fails unless the first and last MiB of a disk are zeros.
func checkWiped(t *testing.T, d []byte) {
	t.Helper()
	n := min(len(d), disk.MiB)
	if !bytes.Equal(d[:n], make([]byte, n)) || !bytes.Equal(d[len(d)-n:], make([]byte, n)) {
		t.Fatal("the first and last MiB of the failed disk are not zeros")
	}
}

func TestImageFallsBackAndResumes(t *testing.T) {
	raw := diskImage(12<<20, 3)
	art := compress(t, raw, proto.CompressionGzip)
	other := compress(t, diskImage(12<<20, 4), proto.CompressionGzip)
	cases := map[string]struct {
		setup func(s *fetchtest.Server) (cache string)
		// noSource leaves the source out, as the registry does when the site's image
		// sources do not allow it.
		noSource     bool
		wantLocation string
		wantResumes  int
		wantRequests map[string][]string
	}{
		"cache hit": {func(s *fetchtest.Server) string { return s.Put("/cache", art) }, false, "cache", 0,
			map[string][]string{"/cache": {""}}},
		"cache hit, no source": {func(s *fetchtest.Server) string { return s.Put("/cache", art) }, true, "cache", 0,
			map[string][]string{"/cache": {""}}},
		"cache 404": {func(s *fetchtest.Server) string { return s.URL + "/cache" }, false, "source", 0,
			map[string][]string{"/cache": {""}, "/source": {""}}},
		"cache down": {func(s *fetchtest.Server) string { return "http://127.0.0.1:1/cache" }, false, "source", 0,
			map[string][]string{"/source": {""}}},
		"cache holds another artifact": {func(s *fetchtest.Server) string { return s.Put("/cache", other) }, false, "source", 0,
			map[string][]string{"/cache": {""}, "/source": {""}}},
		"cache breaks twice": {func(s *fetchtest.Server) string {
			s.BreakAfter("/cache", 100_000, 1<<20)
			return s.Put("/cache", art)
		}, false, "cache", 2, map[string][]string{"/cache": {"", "bytes=100000-", "bytes=1148576-"}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := fetchtest.New(t)
			cache := tc.setup(s)
			in := Input{CacheURL: cache, SourceURL: s.Put("/source", art), Digest: digest(art), Format: proto.FormatRaw,
				Compression: proto.CompressionGzip, Target: emptyDisk(t)}
			if tc.noSource {
				in.SourceURL = ""
			}
			res, err := Image(context.Background(), in, fast)
			if err != nil {
				t.Fatal(err)
			}
			if fileDigest(t, in.Target) != digest(raw) {
				t.Fatal("the target does not hold the image")
			}
			if res.Location != tc.wantLocation || res.Resumes != tc.wantResumes {
				t.Errorf("from %s after %d resumes, want %s after %d", res.Location, res.Resumes, tc.wantLocation, tc.wantResumes)
			}
			got := map[string][]string{}
			for _, p := range []string{"/cache", "/source"} {
				if r := s.Requests(p); len(r) > 0 {
					got[p] = r
				}
			}
			if diff := cmp.Diff(tc.wantRequests, got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

// TestImageFallsBackToAnOCISource: the cache has no copy, and the catalog's source is
// a registry blob behind the anonymous token flow.
func TestImageFallsBackToAnOCISource(t *testing.T) {
	raw := diskImage(4<<20, 6)
	art := compress(t, raw, proto.CompressionZstd)
	s := fetchtest.New(t)
	reg := fetchtest.NewRegistry(t)
	in := Input{CacheURL: s.URL + "/cache", SourceURL: reg.Put(digest(art), art), Digest: digest(art),
		Format: proto.FormatRaw, Compression: proto.CompressionZstd, SizeBytes: int64(len(art)), Target: emptyDisk(t)}
	opts := fast
	opts.Transport = reg.Client().Transport.(*http.Transport)
	res, err := Image(context.Background(), in, opts)
	if err != nil {
		t.Fatal(err)
	}
	if fileDigest(t, in.Target) != digest(raw) {
		t.Fatal("the target does not hold the image")
	}
	if res.Location != "source" || res.Read != int64(len(art)) {
		t.Errorf("read %d bytes from %s, want %d from the source", res.Read, res.Location, len(art))
	}
	blob := "/v2/" + fetchtest.Repository + "/blobs/sha256:" + digest(art)
	want := []string{
		"GET " + blob,
		"GET /token?scope=repository%3Aos%2Fubuntu%3Apull&service=test-registry",
		"GET " + blob + " Bearer tok-1",
		"GET /storage/" + digest(art) + "?sig=x Bearer tok-1",
	}
	if diff := cmp.Diff(want, reg.Log()); diff != "" {
		t.Errorf("registry requests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{""}, s.Requests("/cache")); diff != "" {
		t.Errorf("cache requests (-want +got):\n%s", diff)
	}
}

// TestImageSourceStaysWithinItsBound: the cache has no copy and the image's source
// answers with a redirect to another host, one inside the platform's network the site does
// not allow (another loopback port here) that serves the image. The ramdisk does not
// follow it: deploy.image fails FORBIDDEN (source-not-allowed), naming the host, the disk
// untouched and the other host never connected to. The same redirect to a host the site
// lists (its registry's storage, a CDN) is followed.
func TestImageSourceStaysWithinItsBound(t *testing.T) {
	raw := diskImage(1<<20, 8)
	art := compress(t, raw, proto.CompressionZstd)
	inside := fetchtest.NewCounted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(art) }))
	source := httptest.NewTLSServer(http.RedirectHandler(inside.URL+"/latest/meta-data", http.StatusFound))
	defer source.Close()
	s := fetchtest.New(t)
	opts := fast
	opts.Transport = source.Client().Transport.(*http.Transport)
	sourceHost, insideHost := strings.TrimPrefix(source.URL, "https://"), inside.Host()
	for name, bound := range map[string]*proto.SourceBound{
		"the source's own host alone": nil,
		"the site's image sources":    {Site: []string{sourceHost, "images.example.com"}},
		"a pool that leaves it out":   {Site: []string{sourceHost, insideHost}, Pool: []string{sourceHost}},
	} {
		t.Run(name, func(t *testing.T) {
			in := Input{CacheURL: s.URL + "/cache", SourceURL: source.URL + "/os.raw.zst", ImageSources: bound, Digest: digest(art),
				Format: proto.FormatRaw, Compression: proto.CompressionZstd, Target: emptyDisk(t)}
			_, err := Image(context.Background(), in, opts)
			e := proto.AsError(err)
			if e == nil || e.Code != proto.Forbidden || e.Details.Reason != proto.ReasonSourceNotAllowed || !strings.Contains(e.Message, insideHost) {
				t.Fatalf("%v: want FORBIDDEN source-not-allowed naming %s", err, insideHost)
			}
			if inside.Conns() != 0 {
				t.Errorf("%d connections to the host the source redirected to", inside.Conns())
			}
			if fi, err := os.Stat(in.Target); err != nil || fi.Size() != 0 {
				t.Errorf("the disk was written")
			}
		})
	}
	in := Input{SourceURL: source.URL + "/os.raw.zst", ImageSources: &proto.SourceBound{Site: []string{sourceHost, insideHost}},
		Digest: digest(art), Format: proto.FormatRaw, Compression: proto.CompressionZstd, Target: emptyDisk(t)}
	if _, err := Image(context.Background(), in, opts); err != nil || fileDigest(t, in.Target) != digest(raw) {
		t.Fatalf("a redirect to a listed host: %v", err)
	}
}

// TestImageMemoryBounded streams 256 MiB and samples the heap meanwhile: buffers are
// fixed, so the heap stays far below the image's size.
func TestImageMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 256 MiB")
	}
	raw := diskImage(256<<20, 5)
	art := compress(t, raw, proto.CompressionZstd)
	want := digest(raw)
	s := fetchtest.New(t)
	url := s.Put("/img", art)
	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	target := emptyDisk(t)
	_, err := Image(context.Background(), Input{SourceURL: url, Digest: digest(art), Format: proto.FormatRaw,
		Compression: proto.CompressionZstd, Target: target}, fast)
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if fileDigest(t, target) != want {
		t.Fatal("the target does not hold the image")
	}
	// The test holds the image and the artifact itself (base); the stream adds its
	// chunks, the decoder's window and blocks, and the writer's three blocks.
	const bound = 96 << 20
	grew := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("the heap grew by at most %d MiB while streaming 256 MiB", grew>>20)
	if grew > bound {
		t.Errorf("the heap grew by %d MiB while streaming, more than %d MiB", grew>>20, bound>>20)
	}
}

func TestImageCancelled(t *testing.T) {
	raw := diskImage(8<<20, 6)
	s := fetchtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Image(ctx, Input{SourceURL: s.Put("/img", raw), Digest: digest(raw), Format: proto.FormatRaw,
		Compression: proto.CompressionNone, Target: emptyDisk(t)}, fast)
	if proto.CodeOf(err) != proto.Timeout || !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled deploy: %v, want TIMEOUT wrapping context.Canceled", err)
	}
}

func TestImageMissingTarget(t *testing.T) {
	s := fetchtest.New(t)
	target := filepath.Join(t.TempDir(), "nvme9n1")
	_, err := Image(context.Background(), Input{SourceURL: s.Put("/img", []byte("x")), Digest: digest([]byte("x")),
		Format: proto.FormatRaw, Compression: proto.CompressionNone, Target: target}, fast)
	if e := proto.AsError(err); e.Code != proto.DriverError || e.Details.Reason != proto.ReasonDiskWrite {
		t.Fatalf("Image onto a missing disk: %v", err)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatal("deploy.image created the missing target")
	}
}

// TestImageRedirectsSecretStaysOutOfTheError: the cache has no copy (its URL carries the
// registry's capability), and the image's source redirects to storage the site lists, with a presigned URL whose query (and user
// information) is a credential; the storage host cannot be reached. deploy.image fails,
// naming the host it could not reach, and neither its error (the step's error, which
// events, the CLI and the console show) nor the ramdisk's log holds the credential.
// Before, the connection's failure carried the hop's whole URL into the error, and the
// log named each location with its query.
func TestImageRedirectsSecretStaysOutOfTheError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	storage := l.Addr().String()
	l.Close() // nothing listens there any more: the hop's connection is refused
	source := httptest.NewTLSServer(http.RedirectHandler("https://presigned-user:presigned-password@"+storage+
		"/blobs/os.raw.zst?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=presigned-signature", http.StatusFound))
	defer source.Close()
	var log testkit.SyncBuffer
	opts := fast
	opts.Transport = source.Client().Transport.(*http.Transport)
	opts.Log = slog.New(slog.NewTextHandler(&log, nil))
	cache := fetchtest.New(t) // holds no copy: the deploy goes on to the source
	in := Input{CacheURL: cache.URL + "/cache?cap=cache-capability", SourceURL: source.URL + "/os.raw.zst", Digest: digest([]byte("x")), Format: proto.FormatRaw,
		Compression: proto.CompressionZstd, Target: emptyDisk(t),
		ImageSources: &proto.SourceBound{Site: []string{strings.TrimPrefix(source.URL, "https://"), storage}}}
	_, err = Image(context.Background(), in, opts)
	e := proto.AsError(err)
	if e == nil || e.Code != proto.DriverError || e.Details.Reason != proto.ReasonImageUnavailable || !strings.Contains(e.Message, storage) {
		t.Fatalf("%v: want DRIVER_ERROR image-unavailable naming %s", err, storage)
	}
	if !strings.Contains(e.Message, "https://"+storage+"/blobs/os.raw.zst?...") {
		t.Errorf("the error does not name the hop without its query: %s", e.Message)
	}
	for _, secret := range []string{"presigned-signature", "AKIAEXAMPLE", "presigned-user", "presigned-password", "cache-capability"} {
		if strings.Contains(e.Message, secret) {
			t.Errorf("the error holds the presigned URL's %s: %s", secret, e.Message)
		}
		if strings.Contains(log.String(), secret) {
			t.Errorf("the log holds the presigned URL's %s: %s", secret, log.String())
		}
	}
}
