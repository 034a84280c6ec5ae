package cache

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// readyCache is a running cache holding a, pulled from a loopback source.
func readyCache(t testing.TB, a artifact, cfg Config) *harness {
	t.Helper()
	src := newSource(t)
	url := src.add("/a", a.data)
	cfg.RootCAs = src.config().RootCAs
	h := start(t, cfg)
	if err := h.c.SetDesired([]proto.CacheImage{image(a, url)}); err != nil {
		t.Fatal(err)
	}
	h.waitState(a.digest, proto.CacheReady)
	return h
}

func TestServe(t *testing.T) {
	a := newArtifact(50, 64<<10)
	clock := newFakeClock()
	h := readyCache(t, a, Config{Clock: clock})
	srv := httptest.NewServer(h.c.Handler())
	t.Cleanup(srv.Close)
	etag := `"` + a.digest + `"`
	type result struct {
		Status int
		ETag   string
		Range  string
		Body   []byte
	}
	for name, tc := range map[string]struct {
		method, path string
		hdr          map[string]string
		want         result
	}{
		"whole": {
			want: result{Status: 200, ETag: etag, Body: a.data},
		},
		"a range": {
			hdr:  map[string]string{"Range": "bytes=100-199"},
			want: result{Status: 206, ETag: etag, Range: "bytes 100-199/65536", Body: a.data[100:200]},
		},
		"a suffix range": {
			hdr:  map[string]string{"Range": "bytes=-10"},
			want: result{Status: 206, ETag: etag, Range: "bytes 65526-65535/65536", Body: a.data[len(a.data)-10:]},
		},
		"an open range": {
			hdr:  map[string]string{"Range": "bytes=65530-"},
			want: result{Status: 206, ETag: etag, Range: "bytes 65530-65535/65536", Body: a.data[65530:]},
		},
		"an unsatisfiable range": {
			hdr:  map[string]string{"Range": "bytes=2000000-"},
			want: result{Status: 416, Range: "bytes */65536", Body: []byte("invalid range: failed to overlap\n")},
		},
		"if-none-match with the digest": {
			hdr:  map[string]string{"If-None-Match": etag},
			want: result{Status: 304, ETag: etag},
		},
		"if-range with the digest": {
			hdr:  map[string]string{"Range": "bytes=0-9", "If-Range": etag},
			want: result{Status: 206, ETag: etag, Range: "bytes 0-9/65536", Body: a.data[:10]},
		},
		"if-range with another etag sends all": {
			hdr:  map[string]string{"Range": "bytes=0-9", "If-Range": `"other"`},
			want: result{Status: 200, ETag: etag, Body: a.data},
		},
		"head": {
			method: http.MethodHead,
			want:   result{Status: 200, ETag: etag},
		},
		"not in the cache": {
			path: ImagePathPrefix + strings.Repeat("ab", 32),
			want: result{Status: 404, Body: []byte(`{"code":"NOT_FOUND","message":"image sha256:` + strings.Repeat("ab", 32) + ` is not ready in this cache"}` + "\n")},
		},
		"not a digest": {
			path: ImagePathPrefix + "ABC",
			want: result{Status: 404, Body: []byte(`{"code":"NOT_FOUND","message":"no image at /images/sha256/ABC: the path is /images/sha256/DIGEST, 64 lower-case hex digits"}` + "\n")},
		},
		"another method": {
			method: http.MethodPost,
			want:   result{Status: 405, Body: []byte(`{"code":"UNSUPPORTED","message":"only GET and HEAD"}` + "\n")},
		},
	} {
		t.Run(name, func(t *testing.T) {
			method, path := cmpOr(tc.method, http.MethodGet), cmpOr(tc.path, ImagePathPrefix+a.digest)
			req, _ := http.NewRequest(method, srv.URL+path, nil)
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			got := result{Status: resp.StatusCode, ETag: resp.Header.Get("ETag"), Range: resp.Header.Get("Content-Range"), Body: body}
			if len(got.Body) == 0 {
				got.Body = nil
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				if len(diff) > 2000 {
					diff = diff[:2000]
				}
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Several ranges in one request are answered as net/http does: 206 with a
// multipart/byteranges body, one part per range.
func TestServeMultipleRanges(t *testing.T) {
	a := newArtifact(51, 64<<10)
	h := readyCache(t, a, Config{})
	resp := get(t, h, a.digest, http.Header{"Range": {"bytes=0-3,100-103"}})
	if resp.StatusCode != 206 {
		t.Fatalf("status %s, want 206", resp.Status)
	}
	mt, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "multipart/byteranges" {
		t.Fatalf("content type %q", mt)
	}
	mr := multipart.NewReader(resp.Body, params["boundary"])
	var got [][]byte
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		got = append(got, b)
	}
	if diff := cmp.Diff([][]byte{a.data[0:4], a.data[100:104]}, got); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
}

func TestServeTouchesLastUse(t *testing.T) {
	a := newArtifact(52, 4096)
	clock := newFakeClock()
	h := readyCache(t, a, Config{Clock: clock})
	clock.Advance(time.Hour)
	resp := get(t, h, a.digest, http.Header{"Range": {"bytes=0-0"}})
	io.Copy(io.Discard, resp.Body)
	want := clock.Now()
	e, _ := h.entry(a.digest)
	if !e.LastUsed.Equal(want) {
		t.Errorf("last use %v, want %v", e.LastUsed, want)
	}
	waitFor(t, "the report of the use", func() bool {
		r := h.reports.latest()
		return len(r) == 1 && r[0].LastUsed.Equal(want)
	})
	// A HEAD is a probe, not a use.
	clock.Advance(time.Hour)
	headReq, _ := http.NewRequest(http.MethodHead, "/images/sha256/"+a.digest, nil)
	h.c.Handler().ServeHTTP(httptest.NewRecorder(), headReq)
	if e, _ := h.entry(a.digest); !e.LastUsed.Equal(want) {
		t.Errorf("a HEAD moved the last use to %v", e.LastUsed)
	}
	// The last use is in the index after a restart.
	dir := h.cfg.Dir
	h.stop()
	h2 := start(t, Config{Dir: dir, Clock: clock})
	e2 := h2.waitState(a.digest, proto.CacheReady)
	if !e2.LastUsed.Equal(want) {
		t.Errorf("after a restart the last use is %v, want %v", e2.LastUsed, want)
	}
}

// curl, a real client, fetches a byte range and gets exactly those bytes with 206 and the
// ETag.
func TestCurlFetchesARange(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is not installed: run .ci/deps.sh")
	}
	a := newArtifact(53, 2<<20)
	h := readyCache(t, a, Config{})
	srv := httptest.NewServer(h.c.Handler())
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	out, hdrs := filepath.Join(dir, "body"), filepath.Join(dir, "headers")
	cmd := exec.Command(curl, "--silent", "--show-error", "--fail", "--noproxy", "*",
		"--range", "1000000-1099999", "--dump-header", hdrs, "--output", out,
		"--write-out", "%{http_code}", srv.URL+ImagePathPrefix+a.digest)
	code, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	if string(code) != "206" {
		t.Errorf("curl got %s, want 206", code)
	}
	body := readFile(t, out)
	if !bytes.Equal(body, a.data[1000000:1100000]) {
		t.Errorf("curl got %d bytes that are not the range", len(body))
	}
	h2 := string(readFile(t, hdrs))
	for _, want := range []string{"ETag: \"" + a.digest + "\"", "Content-Range: bytes 1000000-1099999/2097152", "Content-Length: 100000"} {
		if !strings.Contains(strings.ToLower(h2), strings.ToLower(want)) {
			t.Errorf("headers lack %q:\n%s", want, h2)
		}
	}
}
