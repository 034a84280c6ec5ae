package cache

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestStartupReverificationRemovesACorruptFile(t *testing.T) {
	src := newSource(t)
	a := newArtifact(60, 512<<10)
	url := src.add("/a", a.data)
	cfg := src.config()
	h := start(t, cfg)
	h.c.SetDesired([]proto.CacheImage{image(a, url)})
	h.waitState(a.digest, proto.CacheReady)
	h.stop()

	// A bit flips on disk while the cache is down.
	path := filepath.Join(h.cfg.Dir, "sha256", a.digest)
	b := readFile(t, path)
	b[1234] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	served := src.served.Load()

	cfg.Dir = h.cfg.Dir
	h2 := start(t, cfg)
	h2.c.SetDesired([]proto.CacheImage{image(a, url)})
	h2.waitState(a.digest, proto.CacheReady)
	if err := fileHashes(path, a.digest); err != nil {
		t.Errorf("after re-verification: %v", err)
	}
	if got := src.served.Load() - served; got != int64(len(a.data)) {
		t.Errorf("re-pulled %d bytes, want %d", got, len(a.data))
	}
}

func TestStartupSquaresTheIndexWithTheFiles(t *testing.T) {
	good, torn, stray := newArtifact(61, 8192), newArtifact(62, 8192), newArtifact(63, 8192)
	dir := t.TempDir()
	idx, err := openIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"sha256", "partial"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	write := func(rel string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, rel), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// good: renamed into place, but the crash came before the index said ready.
	write("sha256/"+good.digest, good.data)
	// torn: a pull in progress with half its bytes.
	write("partial/"+torn.digest, torn.data[:4096])
	// stray: a partial file no record asks for, and junk in sha256/.
	write("partial/"+stray.digest, stray.data)
	write("sha256/not-a-digest", []byte("junk"))
	gone := newArtifact(64, 10)
	idx.put(
		record{Digest: good.digest, State: proto.CachePulling, SizeBytes: 8192},
		record{Digest: torn.digest, State: proto.CachePulling, SizeBytes: 8192},
		record{Digest: gone.digest, State: proto.CacheEvicting, SizeBytes: 10},
	)
	write("sha256/"+gone.digest, gone.data)
	idx.close()

	src := newSource(t)
	cfg := src.config()
	cfg.Dir = dir
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := []proto.ImageCacheEntry{
		{Digest: good.digest, State: proto.CachePulling, SizeBytes: 8192}, // until re-verified
		{Digest: torn.digest, State: proto.CachePulling, SizeBytes: 4096},
	}
	sortEntries(want)
	if diff := cmp.Diff(want, c.Entries()); diff != "" {
		t.Errorf("entries after Open (-want +got):\n%s", diff)
	}
	var names []string
	for _, d := range []string{"sha256", "partial"} {
		des, _ := os.ReadDir(filepath.Join(dir, d))
		for _, de := range des {
			names = append(names, d+"/"+de.Name())
		}
	}
	if diff := cmp.Diff([]string{"sha256/" + good.digest, "partial/" + torn.digest}, names); diff != "" {
		t.Errorf("files after Open (-want +got):\n%s", diff)
	}
	// Not served before it is verified.
	srv := c.Handler()
	rec := httptest.NewRecorder()
	req, _ := http.NewRequest(http.MethodGet, ImagePathPrefix+good.digest, nil)
	srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET before verification: %d, want 404", rec.Code)
	}
}

func TestUndesiredImages(t *testing.T) {
	src := newSource(t)
	kept, pulling := newArtifact(65, 64<<10), newArtifact(66, 4<<20)
	keptURL := src.add("/kept", kept.data)
	pullURL := src.add("/pulling", pulling.data)
	cfg := src.config()
	cfg.BandwidthBytesPerSec = 1 << 20 // the big one takes seconds
	h := start(t, cfg)
	h.c.SetDesired([]proto.CacheImage{image(kept, keptURL)})
	h.waitState(kept.digest, proto.CacheReady)
	h.c.SetDesired([]proto.CacheImage{image(kept, keptURL), image(pulling, pullURL)})
	waitFor(t, "the pull to start", func() bool { e, _ := h.entry(pulling.digest); return e.SizeBytes > 0 })

	h.c.SetDesired(nil)
	waitFor(t, "the pull to be dropped", func() bool { _, ok := h.entry(pulling.digest); return !ok })
	if _, err := os.Stat(filepath.Join(h.cfg.Dir, "partial", pulling.digest)); !os.IsNotExist(err) {
		t.Errorf("the dropped pull's partial file: %v, want it gone", err)
	}
	// A ready image no longer desired stays until its space is needed.
	if e, _ := h.entry(kept.digest); e.State != proto.CacheReady {
		t.Errorf("the ready image is %q, want it kept ready", e.State)
	}
}
