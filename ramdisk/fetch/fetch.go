// Package fetch reads an artifact over HTTP as one stream that survives broken
// connections: when the body breaks off, it asks again from the byte it had reached
// (Range, guarded by If-Range with the first answer's validator), so the reader above
// it never sees the break and never reads a byte twice.
package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Options tune the stream. The zero value is usable.
type Options struct {
	// Client makes the requests; nil is a client with no overall timeout.
	Client *http.Client
	// Retries is how many resumes in a row may fail before the stream gives up (default
	// 5); a resume that delivers bytes starts the count again.
	Retries int
	// RetryDelay is the pause before each resume (default 1s, negative for none); the
	// nth resume in a row waits n times it.
	RetryDelay time.Duration
	// StallTimeout breaks a connection that delivers nothing for this long (default 60s),
	// which then resumes like any broken one.
	StallTimeout time.Duration
	// Log receives a line for each resume; nil discards.
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}
	}
	if o.Retries == 0 {
		o.Retries = 5
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = time.Second
	}
	if o.StallTimeout == 0 {
		o.StallTimeout = 60 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// StatusError is an answer other than the one asked for.
type StatusError struct {
	URL    string
	Status int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("GET %s: %d %s", e.URL, e.Status, http.StatusText(e.Status))
}

// ErrChanged means a resume found another artifact at the URL (the validator no longer
// matched, or the server ignored the range): the stream cannot go on.
var ErrChanged = errors.New("the artifact changed or the server cannot resume")

// Body is the artifact's bytes, read in order from the first to the last.
type Body struct {
	ctx   context.Context
	abort context.CancelFunc
	url   string
	opts  Options

	resp   *http.Response
	cancel context.CancelFunc
	stall  *time.Timer

	off       int64
	size      int64
	validator string
	resumes   int
}

// Open asks for url and returns its body once the server has answered 200.
func Open(ctx context.Context, url string, opts Options) (*Body, error) {
	ctx, abort := context.WithCancel(ctx)
	b := &Body{ctx: ctx, abort: abort, url: url, opts: opts.withDefaults(), size: -1}
	if err := b.request(); err != nil {
		abort()
		return nil, err
	}
	return b, nil
}

// Size is the artifact's length as the server announced it, or -1.
func (b *Body) Size() int64 { return b.size }

// Resumes is how many times the stream was picked up again after a break.
func (b *Body) Resumes() int { return b.resumes }

// request sends the first GET, or a ranged one from b.off.
func (b *Body) request() error {
	ctx, cancel := context.WithCancel(b.ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url, nil)
	if err != nil {
		cancel()
		return err
	}
	req.Header.Set("Accept-Encoding", "identity")
	if b.off > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", b.off))
		if b.validator != "" {
			req.Header.Set("If-Range", b.validator)
		}
	}
	b.stall = time.AfterFunc(b.opts.StallTimeout, cancel)
	resp, err := b.opts.Client.Do(req)
	if err != nil {
		b.stall.Stop()
		cancel()
		return err
	}
	if err := b.accept(resp); err != nil {
		resp.Body.Close()
		b.stall.Stop()
		cancel()
		return err
	}
	b.resp, b.cancel = resp, cancel
	return nil
}

// accept checks an answer: 200 to the first request, 206 from b.off to a resume.
func (b *Body) accept(resp *http.Response) error {
	if b.off == 0 {
		if resp.StatusCode != http.StatusOK {
			return &StatusError{URL: b.url, Status: resp.StatusCode}
		}
		b.size = resp.ContentLength
		// If-Range takes a strong ETag or, failing that, the date.
		if etag := resp.Header.Get("ETag"); etag != "" && !strings.HasPrefix(etag, "W/") {
			b.validator = etag
		} else {
			b.validator = resp.Header.Get("Last-Modified")
		}
		return nil
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusOK:
		return ErrChanged
	default:
		return &StatusError{URL: b.url, Status: resp.StatusCode}
	}
	start, total, ok := contentRange(resp.Header.Get("Content-Range"))
	if !ok || start != b.off || (b.size >= 0 && total >= 0 && total != b.size) {
		return fmt.Errorf("%w: Content-Range %q for a resume at %d", ErrChanged, resp.Header.Get("Content-Range"), b.off)
	}
	return nil
}

// contentRange parses "bytes START-END/TOTAL" (TOTAL may be *, returned as -1).
func contentRange(h string) (start, total int64, ok bool) {
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, 0, false
	}
	rng, tot, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, false
	}
	first, _, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return start, total, true
}

// Read reads the next bytes, resuming across broken connections.
func (b *Body) Read(p []byte) (int, error) {
	failures := 0
	for {
		if b.resp != nil {
			n, err := b.resp.Body.Read(p)
			b.off += int64(n)
			if n > 0 {
				b.stall.Reset(b.opts.StallTimeout)
			}
			if err == io.EOF && (b.size < 0 || b.off == b.size) {
				return n, io.EOF
			}
			if err == nil || n > 0 {
				if err != nil {
					b.drop()
				}
				return n, nil
			}
			if b.off > b.size && b.size >= 0 {
				return 0, fmt.Errorf("GET %s: more bytes than the %d announced", b.url, b.size)
			}
			b.drop()
			if cerr := b.ctx.Err(); cerr != nil {
				return 0, cerr
			}
			b.opts.Log.Warn("image stream broke; resuming", "url", b.url, "offset", b.off, "err", err)
		}
		if err := b.ctx.Err(); err != nil {
			return 0, err
		}
		if failures >= b.opts.Retries {
			return 0, fmt.Errorf("GET %s: gave up after %d failed resumes at byte %d", b.url, failures, b.off)
		}
		failures++
		if err := sleep(b.ctx, time.Duration(failures)*b.opts.RetryDelay); err != nil {
			return 0, err
		}
		b.resumes++
		if err := b.request(); err != nil {
			if errors.Is(err, ErrChanged) {
				return 0, fmt.Errorf("GET %s at byte %d: %w", b.url, b.off, err)
			}
			b.opts.Log.Warn("image stream resume failed", "url", b.url, "offset", b.off, "err", err)
		}
	}
}

// drop closes the current connection.
func (b *Body) drop() {
	if b.resp == nil {
		return
	}
	b.resp.Body.Close()
	b.stall.Stop()
	b.cancel()
	b.resp = nil
}

// Abort makes a Read in progress, and every later one, fail at once. Unlike Close it
// may be called while another goroutine reads.
func (b *Body) Abort() { b.abort() }

// Close ends the stream and releases its connection. It must not run during a Read.
func (b *Body) Close() error {
	b.abort()
	b.drop()
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
