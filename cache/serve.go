package cache

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// ImagePathPrefix is where Handler answers: ImagePathPrefix + DIGEST.
const ImagePathPrefix = "/images/sha256/"

// Handler serves ready images by digest: `GET` and `HEAD` of /images/sha256/DIGEST (with a
// capability, `?cap=...`, once RequireCapabilities named its keys), with
// single and multiple byte ranges, the ETag "DIGEST", If-None-Match, If-Range, and the
// file sent with sendfile. An image that is not ready is 404: the cache never pulls on
// demand. Mount it on a mux at ImagePathPrefix; do not wrap its ResponseWriter, or the
// zero-copy path is lost (see docs/cache.md).
func (c *Cache) Handler() http.Handler { return http.HandlerFunc(c.serveImage) }

func (c *Cache) serveImage(w http.ResponseWriter, r *http.Request) {
	d, ok := strings.CutPrefix(r.URL.Path, ImagePathPrefix)
	if !ok || !proto.IsDigest(d) {
		writeError(w, proto.Errorf(proto.NotFound, "no image at %s: the path is %sDIGEST, 64 lower-case hex digits", r.URL.Path, ImagePathPrefix))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, &proto.Error{Code: proto.Unsupported, Message: "only GET and HEAD"})
		return
	}
	// Before the digest is looked up, so that a refusal says nothing of what the cache
	// holds.
	if keys := c.capKeys.Load(); keys != nil && !proto.VerifyCacheCap(*keys, r.URL.RawQuery, d, c.cfg.Clock.Now()) {
		writeError(w, proto.Errorf(proto.Forbidden, "this cache serves an image only at a URL with a valid capability for it (?%s...), as the registry and the site's boot scripts hand out: this one has none, one for another image, an expired one or one signed by another key", proto.CacheCapQuery).WithReason(proto.ReasonCacheCapability))
		return
	}
	rd := c.acquire(d, r.Method == http.MethodGet, http.NewResponseController(w))
	if c.cfg.Observer != nil {
		c.cfg.Observer.ImageRequested(rd != nil)
	}
	if rd == nil {
		writeError(w, proto.Errorf(proto.NotFound, "image sha256:%s is not ready in this cache", d))
		return
	}
	defer c.release(rd)
	h := w.Header()
	h.Set("ETag", `"`+d+`"`)
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	// ServeContent copies the reader's file to the ResponseWriter with io.CopyN; the
	// ResponseWriter's ReadFrom hands it to the TCP connection, which uses sendfile on
	// the descriptor the reader hands it (SyscallConn).
	http.ServeContent(w, r, "", time.Time{}, rd)
}

// RequireCapabilities makes Handler serve an image only at a URL whose query is a
// capability for its digest (proto.VerifyCacheCap) signed by one of keys; nil serves
// every URL, as a site whose registry names no key does.
func (c *Cache) RequireCapabilities(keys []ed25519.PublicKey) {
	if keys == nil {
		c.capKeys.Store(nil)
		return
	}
	keys = slices.Clone(keys)
	c.capKeys.Store(&keys)
}

// acquire opens a ready image for a reader, counting it so eviction leaves it alone
// while its pin lasts (pinnedUntil), and marks its use now when touch. rc cuts the
// reader's response (nil: none to cut). An image whose readers are being cut takes no
// new one.
func (c *Cache) acquire(d string, touch bool, rc *http.ResponseController) *reader {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[d]
	if e == nil || e.verify || e.rec.State != proto.CacheReady || e.cutting {
		return nil
	}
	f, err := os.Open(c.readyPath(d))
	if err != nil {
		c.cfg.Logger.Error("cache: open a ready image", "digest", d, "err", err)
		return nil
	}
	now := c.cfg.Clock.Now()
	if len(e.readers) == 0 && now.Sub(e.lastRead) >= c.cfg.ReadGrace {
		e.readSince = now // a new run of reads; one that follows another within the grace continues it
	}
	if e.readers == nil {
		e.readers = map[*reader]struct{}{}
	}
	rd := &reader{f: f, e: e, rc: rc}
	e.readers[rd] = struct{}{}
	if touch {
		e.rec.LastUsed = now.UTC()
		c.dirty[d] = true
		c.notify()
	}
	return rd
}

// Holds says whether digest is ready and was verified from source (one of its
// proto.ImageCacheEntry.Sources): only then may the copy stand in for an image from that
// source.
func (c *Cache) Holds(digest, source string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[digest]
	return e != nil && !e.verify && e.rec.State == proto.CacheReady && slices.Contains(e.rec.Sources, source)
}

// release ends rd's read of its image; the last reader's end lets the scheduler look
// again (a pull may wait for the room).
func (c *Cache) release(rd *reader) {
	rd.f.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := rd.e
	delete(e.readers, rd)
	if len(e.readers) == 0 {
		e.cutting, e.lastRead = false, c.cfg.Clock.Now()
		c.kick()
	}
}

// pinnedUntil is when e's readers stop keeping it from eviction: a reader at
// MinReadBytesPerSec would have read it whole by then, since the run of reads began,
// with ReadGrace to spare. Without it, a machine that reads at the least the HTTP
// server's stall timeout allows (a MiB a minute) held an image for days, and kept out
// the image the registry planned in its place. c.mu is held.
func (c *Cache) pinnedUntil(e *entry) time.Time {
	return e.readSince.Add(time.Duration(e.rec.SizeBytes/c.cfg.MinReadBytesPerSec)*time.Second + c.cfg.ReadGrace)
}

// pinned says whether e's readers keep it from eviction now. c.mu is held.
func (c *Cache) pinned(e *entry, now time.Time) bool {
	return len(e.readers) > 0 && now.Before(c.pinnedUntil(e))
}

// cut ends the responses reading e, whose pin has lapsed, so that eviction may take the
// file once they are gone (the last one's release wakes the scheduler); no new reader
// starts on it meanwhile. c.mu is held.
func (c *Cache) cut(e *entry) {
	if !e.cutting {
		c.cfg.Logger.Info("cache: readers cut: their pin lapsed and the room is needed", "digest", e.rec.Digest,
			"readers", len(e.readers), "since", e.readSince)
	}
	e.cutting = true
	for rd := range e.readers {
		rd.cut()
	}
}

// errCut is what a cut reader's file says.
var errCut = errors.New("cache: the read was cut: its pin lapsed and eviction needs the room")

// reader is one response streaming an image's file: ServeContent's io.ReadSeeker, and
// a syscall.Conn, so that the TCP connection still sends the file with sendfile. Once
// cut, it hands no descriptor and reads nothing, so the response ends at its next
// chunk at the latest, and its write deadline, set in the past, ends the write it is in.
type reader struct {
	f       *os.File
	e       *entry
	rc      *http.ResponseController
	stopped atomic.Bool
}

func (rd *reader) cut() {
	rd.stopped.Store(true)
	if rd.rc != nil {
		rd.rc.SetWriteDeadline(time.Unix(1, 0)) // a writer that hides it is cut at its next chunk instead
	}
}

func (rd *reader) Read(p []byte) (int, error) {
	if rd.stopped.Load() {
		return 0, errCut
	}
	return rd.f.Read(p)
}

func (rd *reader) Seek(off int64, whence int) (int64, error) { return rd.f.Seek(off, whence) }

// SyscallConn hands the file's descriptor to sendfile, until the reader is cut.
func (rd *reader) SyscallConn() (syscall.RawConn, error) {
	if rd.stopped.Load() {
		return nil, errCut
	}
	return rd.f.SyscallConn()
}

func writeError(w http.ResponseWriter, e *proto.Error) {
	status := e.Code.HTTPStatus()
	if e.Code == proto.Unsupported {
		status = http.StatusMethodNotAllowed
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(e)
}
