package cache

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// FuzzServe asks a cache holding one ready image for any path, method and Range: only
// GET and HEAD of that image's path are answered with its bytes (whole, or the range the
// answer names); everything else is a proto error: NOT_FOUND, or UNSUPPORTED for another
// method.
func FuzzServe(f *testing.F) {
	a := newArtifact(60, 4<<10)
	h := readyCache(f, a, Config{Clock: newFakeClock()})
	handler := h.c.Handler()
	f.Add(ImagePathPrefix+a.digest, "GET", "")
	f.Add(ImagePathPrefix+a.digest, "HEAD", "bytes=0-0")
	f.Add(ImagePathPrefix+a.digest, "GET", "bytes=100-199")
	f.Add(ImagePathPrefix+a.digest, "GET", "bytes=-10,0-1")
	f.Add(ImagePathPrefix+a.digest, "PUT", "")
	f.Add(ImagePathPrefix+a.digest+"/", "GET", "")
	f.Add(ImagePathPrefix+"../"+a.digest[3:], "GET", "")
	f.Add(ImagePathPrefix+newArtifact(61, 1).digest, "GET", "")
	f.Add("/images/sha256/", "GET", "bytes=0-")
	f.Fuzz(func(t *testing.T, path, method, rng string) {
		r := &http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		if rng != "" {
			r.Header.Set("Range", rng)
		}
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		own := path == ImagePathPrefix+a.digest
		if !own || (method != http.MethodGet && method != http.MethodHead) {
			var e proto.Error
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code == "" {
				t.Fatalf("%s %q answers %d %q, not a proto error", method, path, w.Code, w.Body)
			}
			readOnly := method == http.MethodGet || method == http.MethodHead
			if (readOnly && e.Code != proto.NotFound) || (!readOnly && e.Code != proto.NotFound && e.Code != proto.Unsupported) {
				t.Fatalf("%s %q answers %s", method, path, e.Code)
			}
			return
		}
		if (w.Code == http.StatusOK || w.Code == http.StatusPartialContent) && w.Header().Get("ETag") != `"`+a.digest+`"` {
			t.Fatalf("%d with ETag %q", w.Code, w.Header().Get("ETag"))
		}
		if method == http.MethodHead {
			return
		}
		switch w.Code {
		case http.StatusOK:
			if !bytes.Equal(w.Body.Bytes(), a.data) {
				t.Fatalf("200 with %d bytes that are not the image", w.Body.Len())
			}
		case http.StatusPartialContent:
			var first, last, size int
			if _, err := fmt.Sscanf(w.Header().Get("Content-Range"), "bytes %d-%d/%d", &first, &last, &size); err != nil {
				return // multipart/byteranges: several ranges
			}
			if size != len(a.data) || first < 0 || last < first || last >= size || !bytes.Equal(w.Body.Bytes(), a.data[first:last+1]) {
				t.Fatalf("206 %q with %d bytes that are not that range", w.Header().Get("Content-Range"), w.Body.Len())
			}
		case http.StatusRequestedRangeNotSatisfiable:
		default:
			t.Fatalf("GET of the image with Range %q answers %d", rng, w.Code)
		}
	})
}

// FuzzServeCapabilities asks a cache that requires capabilities for any path and query,
// as a machine on the provisioning network may: only the query of a valid capability for
// the path's own digest is served; everything else is a proto error, FORBIDDEN for a
// digest's path whatever the cache holds, and never an ETag.
func FuzzServeCapabilities(f *testing.F) {
	a := newArtifact(62, 4<<10)
	clock := newFakeClock()
	h := readyCache(f, a, Config{Clock: clock})
	key := newCapKey(9)
	h.c.RequireCapabilities([]ed25519.PublicKey{key.Public().(ed25519.PublicKey)})
	handler := h.c.Handler()
	valid := proto.CacheCapQuery + proto.CacheCapability(key, a.digest, clock.Now().Add(time.Hour))
	f.Add(ImagePathPrefix+a.digest, valid)
	f.Add(ImagePathPrefix+a.digest, "")
	f.Add(ImagePathPrefix+a.digest, valid+"&cap=x")
	f.Add(ImagePathPrefix+newArtifact(63, 1).digest, valid)
	f.Add(ImagePathPrefix+a.digest, proto.CacheCapQuery+strings.Repeat("A", proto.CacheCapLen))
	f.Fuzz(func(t *testing.T, path, query string) {
		r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: path, RawQuery: query}, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		if path == ImagePathPrefix+a.digest && query == valid {
			if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), a.data) {
				t.Fatalf("the valid capability answers %d", w.Code)
			}
			return
		}
		var e proto.Error
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || w.Header().Get("ETag") != "" {
			t.Fatalf("GET %q?%q answers %d %q, not a proto error", path, query, w.Code, w.Body)
		}
		d, _ := strings.CutPrefix(path, ImagePathPrefix)
		if proto.IsDigest(d) && path == ImagePathPrefix+d && e.Code != proto.Forbidden {
			t.Fatalf("GET %q?%q answers %s, want FORBIDDEN", path, query, e.Code)
		}
	})
}
