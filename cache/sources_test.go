package cache

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// An image of another tenant names the digest of a ready file with a source of its own:
// the file serves it only once that source was pulled and its bytes hashed to the digest.
// A source serving other bytes is never added, and the file still serves its own source.
func TestReadyFileServesOnlyTheSourcesItWasVerifiedFrom(t *testing.T) {
	acme, beta, liar := newSource(t), newSource(t), newSource(t)
	a := newArtifact(41, 1<<20+3)
	other := newArtifact(42, len(a.data)) // same size, other bytes
	urlA := acme.add("/acme.raw", a.data)
	urlB := beta.add("/beta.raw", a.data)
	urlL := liar.add("/liar.raw", other.data)
	cfg := acme.config()
	cfg.RootCAs.AddCert(beta.srv.Certificate())
	cfg.RootCAs.AddCert(liar.srv.Certificate())
	h := start(t, cfg)

	// The liar is listed first: its bytes never make the file, acme's source does.
	if err := h.c.SetDesired([]proto.CacheImage{image(a, urlL), image(a, urlA)}); err != nil {
		t.Fatal(err)
	}
	waitSources(t, h, a.digest, []string{urlA})
	if e, _ := h.entry(a.digest); e.State != proto.CacheReady {
		t.Fatalf("state %s, want ready", e.State)
	}
	if liar.served.Load() == 0 {
		t.Error("the liar's source was never asked")
	}

	// beta names the digest with its own source: pulled again from it, then added.
	if err := h.c.SetDesired([]proto.CacheImage{image(a, urlA), image(a, urlL), image(a, urlB)}); err != nil {
		t.Fatal(err)
	}
	both := []string{urlA, urlB}
	slices.Sort(both)
	waitSources(t, h, a.digest, both)
	if got := beta.served.Load(); got != int64(len(a.data)) {
		t.Errorf("beta's source served %d bytes, want the artifact's %d", got, len(a.data))
	}
	waitFor(t, "the check's bytes to leave partial/", func() bool {
		left, _ := os.ReadDir(filepath.Join(h.cfg.Dir, "partial"))
		return len(left) == 0
	})
	if e, _ := h.entry(a.digest); e.State != proto.CacheReady || slices.Contains(e.Sources, urlL) {
		t.Fatalf("entry %+v: want ready, without the liar's source", e)
	}
	resp := get(t, h, a.digest, nil)
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || !bytes.Equal(body, a.data) {
		t.Fatalf("GET: %d, %d bytes; want 200 with the artifact", resp.StatusCode, len(body))
	}

	// The sources survive a restart: beta's source is not asked again.
	h.stop()
	served := beta.served.Load()
	cfg.Dir = h.cfg.Dir
	h2 := start(t, cfg)
	if err := h2.c.SetDesired([]proto.CacheImage{image(a, urlA), image(a, urlB)}); err != nil {
		t.Fatal(err)
	}
	e := h2.waitState(a.digest, proto.CacheReady)
	if diff := cmp.Diff(both, e.Sources); diff != "" {
		t.Errorf("sources after a restart (-want +got):\n%s", diff)
	}
	if got := beta.served.Load(); got != served {
		t.Errorf("beta's source served %d more bytes after a restart", got-served)
	}
}

// waitSources waits until d is ready with exactly sources.
func waitSources(t *testing.T, h *harness, d string, sources []string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s ready with sources %v", d[:12], sources), func() bool {
		e, ok := h.entry(d)
		return ok && e.State == proto.CacheReady && slices.Equal(e.Sources, sources)
	})
}
