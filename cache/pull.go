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

	"github.com/better-compute/better-compute/fetch"
	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
)

// copyChunk is the most a pull reads (and asks the bandwidth bucket for) at once.
const copyChunk = 256 << 10

// diskRecheck is how many bytes a pull writes, at most, before it reads the free space of
// the cache's filesystem again (statfs): a write within the room last read does not read
// it, so a fast pull costs one statfs a MiB, not one a TLS record, and what else fills the
// filesystem is seen within a MiB of each pull.
const diskRecheck = 1 << 20

// terminalError is a pull failure that retrying at once cannot mend.
type terminalError struct{ error }

func (t terminalError) Unwrap() error { return t.error }

func terminal(format string, args ...any) error {
	return terminalError{fmt.Errorf(format, args...)}
}

// pull downloads img into partial/DIGEST, resuming what is there, and renames it into
// sha256/DIGEST only when its SHA-256 matches. It returns the artifact's size. A check
// (of another source of a ready file) starts from zero and leaves the bytes in partial/
// for the caller to remove: it only tells whether they match.
func (c *Cache) pull(ctx context.Context, e *entry, img proto.CacheImage, validator string, check bool) (int64, error) {
	src, err := fetch.Parse(img.Source)
	if err != nil {
		return 0, err
	}
	if src.Kind == fetch.OCI && src.Digest != img.Digest {
		return 0, fmt.Errorf("oci source names blob %s, the image's digest is %s", src.Digest, img.Digest)
	}
	path := c.partialPath(img.Digest)
	if check {
		if err := removeFile(path); err != nil {
			return 0, err
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	p := &partial{f: f, h: sha256.New(), max: img.SizeBytes}
	p.room = func(n int64, readDisk bool) (int64, error) { return c.roomFor(e, n, p.max == 0, readDisk) }
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
	if check {
		return size, nil
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

// download appends the rest of src to p and returns the artifact's size. The stream
// resumes broken and stalled connections itself; a request that cannot start is tried
// again, Attempts times in a row.
func (c *Cache) download(ctx context.Context, e *entry, p *partial, src fetch.Source, validator string) (int64, error) {
	for fails := 1; ; fails++ {
		started, err := c.stream(ctx, e, p, src, validator)
		if err == nil {
			return p.n, nil
		}
		// A refusal of the bound is the same on every request.
		if started || errors.As(err, new(terminalError)) || errors.Is(err, fetch.ErrNotAllowed) || ctx.Err() != nil || fails >= c.cfg.Attempts {
			return 0, err
		}
		c.cfg.Logger.Info("cache: pull could not start", "digest", e.rec.Digest, "at", p.n, "err", err)
	}
}

// stream copies src from p's end into p, through the bandwidth bucket. It reports
// whether the request started: once it has, the stream's error ends the pull.
func (c *Cache) stream(ctx context.Context, e *entry, p *partial, src fetch.Source, validator string) (bool, error) {
	// restart drops what p holds when the source sends the artifact whole (it ignores
	// ranges, or it changed), and records the new validator first, so a restart of the
	// cache resumes with the right If-Range.
	restart := func(size int64, v string) error {
		if size >= 0 && p.max > 0 && size != p.max {
			return terminal("the source has %d bytes, the catalog says %d", size, p.max)
		}
		if err := c.saveValidator(e, v); err != nil {
			return err
		}
		e.progress.Store(0)
		return p.reset()
	}
	var body *fetch.Stream
	resumesAtRestart := 0
	opts := fetch.StreamOptions{Retries: c.cfg.Attempts, RetryDelay: -1, StallTimeout: c.cfg.StallTimeout, Log: c.cfg.Logger,
		Restart: func(size int64, v string) error {
			resumesAtRestart = body.Resumes()
			return restart(size, v)
		}}
	body, err := c.fetcher().Stream(ctx, src, p.n, validator, opts)
	if err != nil {
		return false, err
	}
	defer body.Close()
	switch {
	case body.Offset() != p.n:
		if err := restart(body.Size(), body.Validator()); err != nil {
			return true, err
		}
	case p.n > 0:
		p.resumed = true
	case body.Validator() != validator:
		if err := c.saveValidator(e, body.Validator()); err != nil {
			return true, err
		}
	}
	if size := body.Size(); size >= 0 && p.max > 0 && size != p.max {
		return true, terminal("the source has %d bytes, the catalog says %d", size, p.max)
	} else if size >= 0 && p.room != nil {
		// The source tells the size: refuse at once what would not fit (the catalog's
		// size was checked before the pull started; the filesystem may have filled since).
		if _, err := p.room(size, true); err != nil {
			return true, err
		}
	}
	buf := make([]byte, min(copyChunk, c.bucket.Burst()))
	for {
		k, rerr := body.Read(buf)
		if k > 0 {
			if err := c.bucket.Wait(ctx, int64(k)); err != nil {
				return true, err
			}
			if err := p.write(buf[:k]); err != nil {
				return true, err
			}
			e.progress.Store(p.n)
			if c.cfg.Observer != nil {
				c.cfg.Observer.PullProgress(int64(k))
			}
		}
		if rerr == io.EOF {
			// Bytes from before a resume are in the file: a wrong digest may be theirs.
			p.resumed = p.resumed || body.Resumes() > resumesAtRestart
			return true, nil
		}
		if rerr != nil {
			return true, rerr
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
	f   *os.File
	h   hash.Hash
	n   int64 // bytes in the file (and hashed)
	max int64 // the catalog's size; more bytes are refused. 0: unknown, room bounds.
	// room refuses n bytes that do not fit in the cache: for an image of unknown size in
	// its capacity, and, when told to read the filesystem, on it, returning the room
	// there (Cache.roomFor); nil: no bound.
	room    func(n int64, readDisk bool) (int64, error)
	resumed bool // some bytes came from before the last request
	// diskRoom is the most bytes the file may hold by the filesystem when it was read,
	// at diskRead bytes; it is read again past diskRoom or diskRecheck bytes later.
	diskRoom, diskRead int64
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
	p.n, p.diskRoom, p.diskRead = 0, 0, 0
	p.resumed = false
	return nil
}

func (p *partial) write(b []byte) error {
	if p.max > 0 && p.n+int64(len(b)) > p.max {
		return terminal("the source sends more than the catalog's %d bytes", p.max)
	}
	if p.room != nil {
		n := p.n + int64(len(b))
		readDisk := n > min(p.diskRoom, p.diskRead+diskRecheck)
		room, err := p.room(n, readDisk)
		if err != nil {
			return err
		}
		if readDisk {
			p.diskRoom, p.diskRead = room, p.n
		}
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
