package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"

	"github.com/better-compute/better-compute/proto"
)

// startVerify re-hashes e's file in sha256/ in its own goroutine. c.mu is held.
func (c *Cache) startVerify(ctx context.Context, e *entry) {
	e.busy = true
	c.running++
	c.jobs.Add(1)
	go func() {
		defer c.jobs.Done()
		size, err := hashFile(ctx, c.readyPath(e.rec.Digest), e.rec.Digest)
		c.verifyDone(ctx, e, size, err)
	}()
}

// hashFile returns the file's size when its SHA-256 is digest.
func hashFile(ctx context.Context, path, digest string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx, f})
	if err != nil {
		return 0, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digest {
		return 0, proto.Errorf(proto.InvalidState, "file hashes to sha256:%s", got)
	}
	return n, nil
}

// verifyDone makes a verified file ready, and removes one that is not (a desired image
// is then pulled again).
func (c *Cache) verifyDone(ctx context.Context, e *entry, size int64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.kick()
	defer c.notify()
	e.busy = false
	c.running--
	if ctx.Err() != nil {
		return // shutting down: verified at the next start
	}
	e.verify = false
	d := e.rec.Digest
	if err == nil {
		e.rec.State, e.rec.SizeBytes, e.rec.Error, e.rec.Validator = proto.CacheReady, size, "", ""
		c.put(e)
		c.cfg.Logger.Info("cache: verified", "digest", d, "bytes", size)
		return
	}
	c.cfg.Logger.Warn("cache: a ready file failed its check; removed", "digest", d, "err", err)
	if rerr := removeFile(c.readyPath(d)); rerr != nil {
		c.cfg.Logger.Error("cache: remove", "digest", d, "err", rerr)
	}
	if c.desired != nil && !c.wanted[d] {
		if derr := c.drop(e); derr != nil {
			c.cfg.Logger.Error("cache: drop", "digest", d, "err", derr)
		}
		return
	}
	e.rec.State, e.rec.Error, e.rec.Validator, e.rec.Sources = proto.CachePulling, "", "", nil
	e.progress.Store(0)
	c.put(e)
}
