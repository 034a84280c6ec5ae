package cache

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/fetch/fetchtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// TestPullStaysWithinItsBound: a source the site allows answers the cache's pull with a
// redirect to a host inside the platform's network that the site does not allow (another
// loopback port here), which would serve the image. The pull fails, nothing is written
// under sha256/ or left under partial/, the other host is never connected to, and the log
// names the refused host. A registry whose token realm and storage are its own host pulls
// under the same bound.
func TestPullStaysWithinItsBound(t *testing.T) {
	a := newArtifact(40, 64<<10)
	inside := fetchtest.NewCounted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(a.data) }))
	src := httptest.NewTLSServer(http.RedirectHandler(inside.URL+"/latest/meta-data", http.StatusFound))
	defer src.Close()
	reg := fetchtest.NewRegistry(t)
	b := newArtifact(41, 64<<10)

	var log testkit.SyncBuffer
	h := start(t, Config{RootCAs: src.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	h.c.SetBound(proto.SourceBound{Site: []string{strings.TrimPrefix(src.URL, "https://"), strings.TrimPrefix(reg.URL, "https://")}})
	if err := h.c.SetDesired([]proto.CacheImage{image(a, src.URL+"/os.raw"), image(b, reg.Put(b.digest, b.data))}); err != nil {
		t.Fatal(err)
	}
	h.waitState(a.digest, proto.CacheFailed)
	h.waitState(b.digest, proto.CacheReady)
	insideHost := inside.Host()
	if inside.Conns() != 0 {
		t.Errorf("%d connections to the host the source redirected to", inside.Conns())
	}
	for _, path := range []string{h.c.readyPath(a.digest), h.c.partialPath(a.digest)} {
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s: %v, want none", path, err)
		}
	}
	h.c.mu.Lock()
	failure := h.c.entries[a.digest].rec.Error
	h.c.mu.Unlock()
	if !strings.Contains(failure, "redirect to host "+insideHost) {
		t.Errorf("the failure %q does not name the host %s", failure, insideHost)
	}
	if got := log.String(); !strings.Contains(got, "cache: pull refused") || !strings.Contains(got, "host="+insideHost) || !strings.Contains(got, "refused=redirect") {
		t.Errorf("the log does not tell the refusal with its host:\n%s", got)
	}
}
