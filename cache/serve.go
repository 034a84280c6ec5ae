package cache

import (
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
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
	f := c.acquire(d, r.Method == http.MethodGet)
	if c.cfg.Observer != nil {
		c.cfg.Observer.ImageRequested(f != nil)
	}
	if f == nil {
		writeError(w, proto.Errorf(proto.NotFound, "image sha256:%s is not ready in this cache", d))
		return
	}
	defer c.release(d, f)
	h := w.Header()
	h.Set("ETag", `"`+d+`"`)
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	// ServeContent copies the *os.File to the ResponseWriter with io.CopyN; the
	// ResponseWriter's ReadFrom hands it to the TCP connection, which uses sendfile.
	http.ServeContent(w, r, "", time.Time{}, f)
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

// acquire opens a ready image for a reader, counting it so eviction leaves it alone, and
// marks its use now when touch.
func (c *Cache) acquire(d string, touch bool) *os.File {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[d]
	if e == nil || e.verify || e.rec.State != proto.CacheReady {
		return nil
	}
	f, err := os.Open(c.readyPath(d))
	if err != nil {
		c.cfg.Logger.Error("cache: open a ready image", "digest", d, "err", err)
		return nil
	}
	e.readers++
	if touch {
		e.rec.LastUsed = c.cfg.Clock.Now().UTC()
		c.dirty[d] = true
		c.notify()
	}
	return f
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

func (c *Cache) release(d string, f *os.File) {
	f.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[d]; e != nil {
		e.readers--
		if e.readers == 0 {
			c.kick()
		}
	}
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
