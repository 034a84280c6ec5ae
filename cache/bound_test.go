package cache

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/fetch/fetchtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
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

// TestRefusedPullIsTriedAgainOnceTheBoundAllowsIt: a source the site allows redirects
// the cache to storage on a host it does not, with a presigned secret in the query. The
// image fails with reason source-not-allowed and that host, never the query; an image
// whose source answers 404 fails with no reason. Time stands still (a fake clock, and
// RetryInterval an hour), so no waiting makes either be tried again. The operator then
// lists the storage host: the refused image is pulled at once, from that host, and
// becomes ready, while the image that failed otherwise keeps its wait and is not pulled
// again. Before, the refused image stayed failed until RetryInterval passed.
func TestRefusedPullIsTriedAgainOnceTheBoundAllowsIt(t *testing.T) {
	a := newArtifact(45, 64<<10)
	gone := newArtifact(46, 64<<10)
	storage := fetchtest.NewCounted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(a.data) }))
	src := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/a.raw" {
			http.Redirect(w, r, storage.URL+"/blobs/a?X-Amz-Signature=presigned-secret", http.StatusFound)
			return
		}
		http.NotFound(w, r)
	}))
	defer src.Close()
	srcHost := strings.TrimPrefix(src.URL, "https://")

	var log testkit.SyncBuffer
	h := start(t, Config{RootCAs: src.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, Clock: newFakeClock(), RetryInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	h.c.SetBound(proto.SourceBound{Site: []string{srcHost}})
	if err := h.c.SetDesired([]proto.CacheImage{image(a, src.URL+"/a.raw"), image(gone, src.URL+"/gone.raw")}); err != nil {
		t.Fatal(err)
	}
	refused := h.waitState(a.digest, proto.CacheFailed)
	failed := h.waitState(gone.digest, proto.CacheFailed)
	if refused.Reason != proto.ReasonSourceNotAllowed || refused.RefusedHost != storage.Host() {
		t.Errorf("the refused image reports reason %q, host %q; want %q, %q", refused.Reason, refused.RefusedHost, proto.ReasonSourceNotAllowed, storage.Host())
	}
	if failed.Reason != "" || failed.RefusedHost != "" {
		t.Errorf("the image whose source answered 404 reports reason %q, host %q; want none", failed.Reason, failed.RefusedHost)
	}
	if report, _ := json.Marshal(h.c.Entries()); strings.Contains(string(report), "presigned-secret") {
		t.Errorf("the report shows the refused request's query: %s", report)
	}
	if storage.Conns() != 0 {
		t.Fatalf("%d connections to the storage host before it was allowed", storage.Conns())
	}

	// The same bound again changes nothing.
	h.c.SetBound(proto.SourceBound{Site: []string{srcHost}})
	h.c.SetBound(proto.SourceBound{Site: []string{srcHost, storage.Host()}})
	h.waitState(a.digest, proto.CacheReady)
	if storage.Conns() == 0 {
		t.Error("the image became ready without a pull from the host now allowed")
	}
	pulls := strings.Count(log.String(), `msg="cache: pull" digest=`+gone.digest)
	if e, _ := h.entry(gone.digest); pulls != 1 || e.State != proto.CacheFailed {
		t.Errorf("the image that failed for another reason was pulled %d times and is %s; want once, and failed until its interval", pulls, e.State)
	}
}

// TestRefusedSecondSourceIsReported: a ready file's digest is named by a second image
// whose source is on a host the site's image sources lack. Its check is refused: the
// file stays ready for its own source, and its report names the refused source with the
// host it was refused at, so that the operator sees why the second image is not at the
// site. Once the host is listed, the source is checked at once, joins the file's sources
// and leaves the refused ones. Before, the refusal was only logged.
func TestRefusedSecondSourceIsReported(t *testing.T) {
	own, other := newSource(t), newSource(t)
	a := newArtifact(47, 64<<10)
	urlOwn, urlOther := own.add("/a.raw", a.data), other.add("/a.raw", a.data)
	cfg := own.config()
	cfg.RootCAs.AddCert(other.srv.Certificate())
	cfg.Clock, cfg.RetryInterval = newFakeClock(), time.Hour
	h := start(t, cfg)
	ownHost, otherHost := strings.TrimPrefix(own.srv.URL, "https://"), strings.TrimPrefix(other.srv.URL, "https://")
	h.c.SetBound(proto.SourceBound{Site: []string{ownHost}})
	if err := h.c.SetDesired([]proto.CacheImage{image(a, urlOwn), image(a, urlOther)}); err != nil {
		t.Fatal(err)
	}
	want := []proto.RefusedSource{{Source: urlOther, RefusedHost: otherHost}}
	var e proto.ImageCacheEntry
	waitFor(t, "the second source's refusal to be reported", func() bool {
		e, _ = h.entry(a.digest)
		return len(e.Refused) > 0
	})
	if diff := cmp.Diff(want, e.Refused); diff != "" {
		t.Errorf("refused sources (-want +got):\n%s", diff)
	}
	if e.State != proto.CacheReady || !slices.Equal(e.Sources, []string{urlOwn}) || e.Reason != "" || e.RefusedHost != "" {
		t.Errorf("entry %+v: want ready for its own source only, with no reason of its own", e)
	}
	if other.served.Load() != 0 {
		t.Errorf("the refused source served %d bytes", other.served.Load())
	}

	h.c.SetBound(proto.SourceBound{Site: []string{ownHost, otherHost}})
	both := []string{urlOwn, urlOther}
	slices.Sort(both)
	waitSources(t, h, a.digest, both)
	if e, _ := h.entry(a.digest); e.Refused != nil {
		t.Errorf("the source checked since is still reported refused: %+v", e.Refused)
	}
}

// TestNarrowedBoundHoldsAPullUnderWay: the operator takes a storage host off the site's
// image sources while the cache is pulling an image its allowed source redirected there.
// The connection then breaks, as a long pull's does. The pull goes no further under the
// old list: the storage host is asked nothing more, and the image fails with reason
// source-not-allowed at that host. Before, the pull resumed with the client of the old
// list, followed the source's redirect to the host no longer listed, and the image
// became ready from it.
func TestNarrowedBoundHoldsAPullUnderWay(t *testing.T) {
	a := newArtifact(48, 256<<10)
	half := len(a.data) / 2
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	var requests atomic.Int32
	started := make(chan struct{}, 1)
	storage := fetchtest.NewCounted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) > 1 {
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.data))
			return
		}
		// The first answer: half the image, then, once the test says, a broken connection.
		w.Header().Set("Content-Length", strconv.Itoa(len(a.data)))
		w.Header().Set("ETag", `"v1"`)
		w.Write(a.data[:half])
		w.(http.Flusher).Flush()
		started <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		panic(http.ErrAbortHandler)
	}))
	src := httptest.NewTLSServer(http.RedirectHandler(storage.URL+"/blobs/a", http.StatusFound))
	defer src.Close()
	srcHost := strings.TrimPrefix(src.URL, "https://")

	h := start(t, Config{RootCAs: src.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, Clock: newFakeClock(), RetryInterval: time.Hour})
	h.c.SetBound(proto.SourceBound{Site: []string{srcHost, storage.Host()}})
	if err := h.c.SetDesired([]proto.CacheImage{image(a, src.URL+"/a.raw")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the pull never reached the storage host")
	}
	h.c.SetBound(proto.SourceBound{Site: []string{srcHost}})
	unblock()
	e := h.waitStateOrReady(a.digest, proto.CacheFailed)
	if n := requests.Load(); n != 1 {
		t.Errorf("the storage host was asked %d times, %d after it left the site's image sources", n, n-1)
	}
	if e.State != proto.CacheFailed || e.Reason != proto.ReasonSourceNotAllowed || e.RefusedHost != storage.Host() {
		t.Errorf("the image is %s with reason %q at host %q; want failed, %q at %s", e.State, e.Reason, e.RefusedHost, proto.ReasonSourceNotAllowed, storage.Host())
	}
}

// waitStateOrReady waits until d is in state st, or ready.
func (h *harness) waitStateOrReady(d string, st proto.ImageCacheState) proto.ImageCacheEntry {
	h.t.Helper()
	var e proto.ImageCacheEntry
	waitFor(h.t, fmt.Sprintf("%s to be %s or ready", d[:12], st), func() bool {
		var ok bool
		e, ok = h.entry(d)
		return ok && (e.State == st || e.State == proto.CacheReady)
	})
	return e
}
