package cache

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// unannounced is an HTTPS server on loopback that sends each artifact in pieces, without
// a Content-Length: the cache learns its size only as the bytes come.
func unannounced(t *testing.T, files map[string][]byte) *httptest.Server {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		for len(b) > 0 {
			n := min(len(b), 16<<10)
			if _, err := w.Write(b[:n]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			b = b[n:]
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// unsized is the desired-list entry of an image the catalog knows no size of.
func unsized(a artifact, url string) proto.CacheImage {
	img := image(a, url)
	img.SizeBytes = 0
	return img
}

// An image registered without sizeBytes is pulled whole, from a source that tells its
// length and from one that does not, when it fits in the room the cache has beside an
// image of known size; the cache then reports the size it learned.
func TestPullOfUnknownSizeCompletes(t *testing.T) {
	sized, a, b := newArtifact(90, 64<<10), newArtifact(91, 96<<10), newArtifact(92, 32<<10)
	src := newSource(t)
	chunked := unannounced(t, map[string][]byte{"/b.raw": b.data})
	cfg := src.config()
	cfg.RootCAs.AddCert(chunked.Certificate())
	cfg.CapacityBytes = int64(len(sized.data) + len(a.data) + len(b.data))
	cfg.Clock, cfg.RetryInterval = newFakeClock(), time.Hour
	h := start(t, cfg)
	if err := h.c.SetDesired([]proto.CacheImage{unsized(a, src.add("/a.raw", a.data)), unsized(b, chunked.URL+"/b.raw"),
		image(sized, src.add("/sized.raw", sized.data))}); err != nil {
		t.Fatal(err)
	}
	for _, x := range []artifact{a, b, sized} {
		if e := h.waitState(x.digest, proto.CacheReady); e.SizeBytes != int64(len(x.data)) {
			t.Errorf("%s: reported %d bytes, want the %d it pulled", x.digest[:12], e.SizeBytes, len(x.data))
		}
		if err := fileHashes(h.c.readyPath(x.digest), x.digest); err != nil {
			t.Error(err)
		}
	}
}

// An image registered without sizeBytes whose bytes pass the room the cache has beside a
// ready image of known size fails with reason capacity and a message that tells what to
// do, leaves no partial file, and never evicts the sized image: whether the source tells
// its length (refused before a byte is written) or not (refused at the write that passes
// the room).
func TestPullOfUnknownSizePastTheRoomFails(t *testing.T) {
	for name, chunked := range map[string]bool{"length told": false, "length untold": true} {
		t.Run(name, func(t *testing.T) {
			sized, a := newArtifact(93, 64<<10), newArtifact(94, 96<<10)
			src := newSource(t)
			alt := unannounced(t, map[string][]byte{"/a.raw": a.data})
			cfg := src.config()
			cfg.RootCAs.AddCert(alt.Certificate())
			cfg.CapacityBytes = int64(len(sized.data)+len(a.data)) - 1
			cfg.Clock, cfg.RetryInterval = newFakeClock(), time.Hour
			h := start(t, cfg)
			sizedImg := image(sized, src.add("/sized.raw", sized.data))
			if err := h.c.SetDesired([]proto.CacheImage{sizedImg}); err != nil {
				t.Fatal(err)
			}
			h.waitState(sized.digest, proto.CacheReady)
			url := src.add("/a.raw", a.data)
			if chunked {
				url = alt.URL + "/a.raw"
			}
			if err := h.c.SetDesired([]proto.CacheImage{unsized(a, url), sizedImg}); err != nil {
				t.Fatal(err)
			}
			e := h.waitState(a.digest, proto.CacheFailed)
			if e.Reason != proto.ReasonCapacity {
				t.Errorf("the failed image reports reason %q, want %q", e.Reason, proto.ReasonCapacity)
			}
			h.c.mu.Lock()
			failure := h.c.entries[a.digest].rec.Error
			h.c.mu.Unlock()
			if !strings.Contains(failure, "size is unknown") || !strings.Contains(failure, "register the image with sizeBytes") {
				t.Errorf("the failure %q does not tell why and what to do", failure)
			}
			if _, err := os.Stat(h.c.partialPath(a.digest)); !os.IsNotExist(err) {
				t.Errorf("partial file: %v, want none", err)
			}
			if s, ok := h.entry(sized.digest); !ok || s.State != proto.CacheReady {
				t.Errorf("the sized image is %+v, want ready", s)
			}
		})
	}
}

// An image of known size takes the room of a running pull of unknown size: the sized
// image is pulled while the other is half-way, and the pull of unknown size fails with
// reason capacity at its next write, never the sized one.
func TestSizedImageTakesTheRoomOfAPullOfUnknownSize(t *testing.T) {
	sized, a := newArtifact(95, 64<<10), newArtifact(96, 96<<10)
	half := len(a.data) / 2
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(a.data[:half])
		w.(http.Flusher).Flush()
		<-release
		w.Write(a.data[half:])
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	src := newSource(t)
	cfg := src.config()
	cfg.RootCAs.AddCert(srv.Certificate())
	// Room for the sized image alone, not beside the half pulled.
	cfg.CapacityBytes = int64(len(sized.data)+half) - 1
	cfg.Clock, cfg.RetryInterval = newFakeClock(), time.Hour
	h := start(t, cfg)
	unknown := unsized(a, srv.URL+"/a.raw")
	if err := h.c.SetDesired([]proto.CacheImage{unknown}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "half of the image of unknown size", func() bool {
		e, _ := h.entry(a.digest)
		return e.State == proto.CachePulling && e.SizeBytes >= int64(half)
	})
	if err := h.c.SetDesired([]proto.CacheImage{unknown, image(sized, src.add("/sized.raw", sized.data))}); err != nil {
		t.Fatal(err)
	}
	h.waitState(sized.digest, proto.CacheReady)
	close(release)
	if e := h.waitState(a.digest, proto.CacheFailed); e.Reason != proto.ReasonCapacity {
		t.Errorf("the image of unknown size reports reason %q, want %q", e.Reason, proto.ReasonCapacity)
	}
	if e, _ := h.entry(sized.digest); e.State != proto.CacheReady {
		t.Errorf("the sized image is %s, want ready", e.State)
	}
}
