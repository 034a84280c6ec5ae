package cache

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// The attacker is a tenant's machine that reads its own image, which its pools no longer
// pre-warm, as slowly as the boot server's stall timeout lets it (a MiB a minute: a 10
// GiB image for a week), so that the image stays in a full cache and the image the
// registry planned in its place, another tenant's, never gets in. Its readers keep the
// image only for as long as a reader at MinReadBytesPerSec takes to read it whole, plus
// ReadGrace: a second slow read started late in that time does not renew it, and past
// it the planned image takes the room, both slow reads are cut short, and the image is
// no longer served.
func TestSlowReaderDoesNotKeepAPlannedImageOut(t *testing.T) {
	const size = 8 << 20 // more than loopback's socket buffers hold: the slow reads stay open
	src := newSource(t)
	clock := newFakeClock()
	cfg := src.config()
	cfg.Clock, cfg.RetryInterval, cfg.CapacityBytes = clock, time.Hour, size+size/2
	h := start(t, cfg)
	held, planned := newArtifact(90, size), newArtifact(91, size)
	imgHeld, imgPlanned := image(held, src.add("/held", held.data)), image(planned, src.add("/planned", planned.data))
	if err := h.c.SetDesired([]proto.CacheImage{imgHeld}); err != nil {
		t.Fatal(err)
	}
	h.waitState(held.digest, proto.CacheReady)
	srv := httptest.NewServer(h.c.Handler())
	t.Cleanup(srv.Close)

	first := slowRead(t, srv.URL, held.digest)
	if err := h.c.SetDesired([]proto.CacheImage{imgPlanned}); err != nil {
		t.Fatal(err)
	}
	if e := h.waitState(planned.digest, proto.CacheFailed); e.Reason != proto.ReasonCapacity {
		t.Fatalf("the planned image beside a read one reports %+v, want failed for capacity", e)
	}

	// A reader at the floor rate would have read it whole, with the grace to spare.
	pin := time.Duration(size/DefaultMinReadBytesPerSec)*time.Second + DefaultReadGrace
	clock.Advance(pin - time.Minute)
	second := slowRead(t, srv.URL, held.digest)
	if e, _ := h.entry(planned.digest); e.State == proto.CacheReady {
		t.Fatal("the planned image took the room of an image read within its pin")
	}
	clock.Advance(2 * time.Minute)
	testkit.WaitFor(t, "the planned image to be ready", 15*time.Second, 5*time.Millisecond, func() bool {
		e, _ := h.entry(planned.digest)
		return e.State == proto.CacheReady
	})
	if _, ok := h.entry(held.digest); ok {
		t.Error("the slowly read image is still in the cache")
	}
	if _, err := os.Stat(h.c.readyPath(held.digest)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the slowly read image's file: %v, want it gone", err)
	}
	for name, body := range map[string]io.Reader{"first": first, "second": second} {
		if n, err := io.Copy(io.Discard, body); err == nil || n >= size {
			t.Errorf("the %s slow read went on to %d of %d bytes (%v), want it cut short", name, n, size, err)
		}
	}
	if resp := get(t, h, held.digest, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a new read of the evicted image: %s, want 404", resp.Status)
	}
}

// slowRead GETs an image from the cache at base over a connection with a small receive
// buffer and reads its header alone, so the response stays open; it returns the body,
// which reads as an error if the response is cut short.
func slowRead(t *testing.T, base, digest string) io.Reader {
	t.Helper()
	conn, err := net.Dial("tcp", base[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.(*net.TCPConn).SetReadBuffer(16 << 10)
	req, _ := http.NewRequest(http.MethodGet, base+ImagePathPrefix+digest, nil)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // the cut comes in far less
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %v, want 200", digest[:12], resp, err)
	}
	return resp.Body
}
