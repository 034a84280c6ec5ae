package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"time"

	"github.com/better-compute/better-compute/fetch"
	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
)

// copyChunk is the most a pull reads (and asks the bandwidth bucket for) at once.
const copyChunk = 256 << 10

// terminalError is a pull failure that retrying at once cannot mend.
type terminalError struct{ error }

func terminal(format string, args ...any) error {
	return terminalError{fmt.Errorf(format, args...)}
}

// pull downloads img into partial/DIGEST, resuming what is there, and renames it into
// sha256/DIGEST only when its SHA-256 matches. It returns the artifact's size.
func (c *Cache) pull(ctx context.Context, e *entry, img proto.CacheImage, validator string) (int64, error) {
	src, err := fetch.Parse(img.Source)
	if err != nil {
		return 0, err
	}
	if src.Kind == fetch.OCI && src.Digest != img.Digest {
		return 0, fmt.Errorf("oci source names blob %s, the image's digest is %s", src.Digest, img.Digest)
	}
	path := c.partialPath(img.Digest)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	p := &partial{f: f, h: sha256.New(), max: img.SizeBytes}
	if err := p.load(ctx); err != nil {
		return 0, err
	}
	e.progress.Store(p.n)
	size, err := c.download(ctx, e, p, src, validator)
	if err != nil {
		return 0, err
	}
	if got := hex.EncodeToString(p.h.Sum(nil)); got != img.Digest {
		if p.resumed {
			// The bytes kept from before may be what is wrong (the source changed without
			// a validator, or a crash tore the partial file): try once more from zero.
			c.cfg.Logger.Warn("cache: digest mismatch after a resume; pulling again from zero", "digest", img.Digest)
			if err := p.reset(); err != nil {
				return 0, err
			}
			e.progress.Store(0)
			if size, err = c.download(ctx, e, p, src, ""); err != nil {
				return 0, err
			}
			got = hex.EncodeToString(p.h.Sum(nil))
		}
		if got != img.Digest {
			return 0, terminal("digest mismatch: the source's %d bytes hash to sha256:%s", size, got)
		}
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	if err := os.Rename(path, c.readyPath(img.Digest)); err != nil {
		return 0, err
	}
	if err := fsutil.SyncDir(c.readyDir); err != nil {
		return 0, err
	}
	return size, fsutil.SyncDir(c.partialDir)
}

// download appends the rest of src to p, resuming after broken connections, and returns
// the artifact's size.
func (c *Cache) download(ctx context.Context, e *entry, p *partial, src fetch.Source, validator string) (int64, error) {
	fails := 0
	for {
		n, done, err := c.fetchOnce(ctx, e, p, src, &validator)
		if done {
			return p.n, nil
		}
		if errors.As(err, new(terminalError)) || ctx.Err() != nil {
			return 0, err
		}
		if n > 0 {
			fails = 0
		}
		fails++
		c.cfg.Logger.Info("cache: pull interrupted", "digest", e.rec.Digest, "at", p.n, "err", err)
		if fails >= c.cfg.Attempts {
			return 0, err
		}
	}
}

// fetchOnce makes one request from p's end and copies its body. It reports the bytes it
// added and whether the artifact is complete.
func (c *Cache) fetchOnce(ctx context.Context, e *entry, p *partial, src fetch.Source, validator *string) (int64, bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body, err := c.client.Open(ctx, src, p.n, *validator)
	if err != nil {
		return 0, false, err
	}
	defer body.Close()
	if body.Offset != p.n {
		// The server sends the artifact whole (it ignores ranges, or it changed): restart.
		if err := c.saveValidator(e, body.Validator); err != nil {
			return 0, false, err
		}
		*validator = body.Validator
		if err := p.reset(); err != nil {
			return 0, false, err
		}
		e.progress.Store(0)
	} else if p.n > 0 {
		p.resumed = true
	}
	if p.n == 0 && body.Validator != *validator {
		if err := c.saveValidator(e, body.Validator); err != nil {
			return 0, false, err
		}
		*validator = body.Validator
	}
	if body.Total >= 0 && p.max > 0 && body.Total != p.max {
		return 0, false, terminal("the source has %d bytes, the catalog says %d", body.Total, p.max)
	}
	// A body that delivers nothing for StallTimeout is cut, and resumed like a broken one.
	stall := time.AfterFunc(c.cfg.StallTimeout, cancel)
	defer stall.Stop()
	start := p.n
	buf := make([]byte, min(copyChunk, c.bucket.Burst()))
	for {
		k, rerr := body.Read(buf)
		if k > 0 {
			stall.Reset(c.cfg.StallTimeout)
			if err := c.bucket.Wait(ctx, int64(k)); err != nil {
				return p.n - start, false, err
			}
			if err := p.write(buf[:k]); err != nil {
				return p.n - start, false, err
			}
			e.progress.Store(p.n)
		}
		if rerr == io.EOF {
			return p.n - start, true, nil
		}
		if rerr != nil {
			return p.n - start, false, rerr
		}
	}
}

// saveValidator records the validator of the bytes about to be written to partial/, so a
// restart resumes with the right If-Range.
func (c *Cache) saveValidator(e *entry, v string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.rec.Validator = v
	return c.idx.put(e.rec)
}

// partial is a pull's file under partial/ and the hash of what it holds.
type partial struct {
	f       *os.File
	h       hash.Hash
	n       int64 // bytes in the file (and hashed)
	max     int64 // the catalog's size; more bytes are refused. 0: no bound.
	resumed bool  // some bytes came from before the last request
}

// load hashes what the file holds already (a pull resumed after a restart). A file
// longer than the artifact can be is emptied.
func (p *partial) load(ctx context.Context) error {
	fi, err := p.f.Stat()
	if err != nil {
		return err
	}
	if p.max > 0 && fi.Size() > p.max {
		return p.reset()
	}
	n, err := io.Copy(p.h, ctxReader{ctx, io.LimitReader(p.f, fi.Size())})
	if err != nil {
		return err
	}
	p.n = n
	if _, err := p.f.Seek(n, io.SeekStart); err != nil {
		return err
	}
	return p.f.Truncate(n)
}

func (p *partial) reset() error {
	if err := p.f.Truncate(0); err != nil {
		return err
	}
	if _, err := p.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	p.h.Reset()
	p.n = 0
	p.resumed = false
	return nil
}

func (p *partial) write(b []byte) error {
	if p.max > 0 && p.n+int64(len(b)) > p.max {
		return terminal("the source sends more than the catalog's %d bytes", p.max)
	}
	if _, err := p.f.Write(b); err != nil {
		return err
	}
	p.h.Write(b)
	p.n += int64(len(b))
	return nil
}

// ctxReader stops a long read (hashing a large file) when its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(b)
}
