package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/better-compute/better-compute/clock"
)

// StreamOptions tune a Stream. The zero value is usable.
type StreamOptions struct {
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
	// Restart, if set, is called when a resume is answered with the whole artifact (the
	// server ignored the range, or the artifact changed): the caller drops what it holds
	// and the stream goes on from byte 0 with the answer's size and validator. An error
	// from it ends the stream. Nil makes such an answer ErrChanged.
	Restart func(size int64, validator string) error
}

func (o StreamOptions) withDefaults() StreamOptions {
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

// ErrChanged means a resume found another artifact at the source (the validator no
// longer matched, or the server ignored the range): the stream cannot go on.
var ErrChanged = errors.New("the artifact changed or the server cannot resume")

// Stream is an artifact's bytes, read in order up to the last as one stream that
// survives broken connections: when the body breaks off, it asks again from the byte it
// had reached (Client.Open with the first answer's validator), so the reader above it
// never sees the break and never reads a byte twice.
type Stream struct {
	ctx    context.Context
	abort  context.CancelFunc
	client *Client
	src    Source
	opts   StreamOptions

	body   *Body
	cancel context.CancelFunc
	stall  *time.Timer

	started   bool // the first answer was accepted
	off       int64
	size      int64
	validator string
	resumes   int
}

// Stream asks for src from offset (with If-Range: validator when offset > 0, as
// Client.Open does) and returns the stream once the server has answered. The answer may
// start at 0 instead of offset: Offset tells.
func (c *Client) Stream(ctx context.Context, src Source, offset int64, validator string, opts StreamOptions) (*Stream, error) {
	ctx, abort := context.WithCancel(ctx)
	s := &Stream{ctx: ctx, abort: abort, client: c, src: src, opts: opts.withDefaults(), off: offset, size: -1, validator: validator}
	if err := s.request(); err != nil {
		abort()
		return nil, err
	}
	return s, nil
}

// Size is the artifact's length as the server announced it, or -1.
func (s *Stream) Size() int64 { return s.size }

// Offset is where in the artifact the next byte read belongs.
func (s *Stream) Offset() int64 { return s.off }

// Validator is what a later request for the artifact sends in If-Range: the first
// answer's strong ETag, else its Last-Modified; empty when it gave neither.
func (s *Stream) Validator() string { return s.validator }

// Resumes is how many times the stream was picked up again after a break.
func (s *Stream) Resumes() int { return s.resumes }

// request sends the first GET, or a ranged one from s.off. The stall timer runs from
// the request on, so a server that never answers is cut like one that stops sending.
func (s *Stream) request() error {
	ctx, cancel := context.WithCancel(s.ctx)
	stall := time.AfterFunc(s.opts.StallTimeout, cancel)
	b, err := s.client.Open(ctx, s.src, s.off, s.validator)
	if err == nil {
		if err = s.accept(b); err != nil {
			b.Close()
		}
	}
	if err != nil {
		stall.Stop()
		cancel()
		return err
	}
	s.body, s.cancel, s.stall = b, cancel, stall
	return nil
}

// accept checks an answer: any to the first request, the rest of the same artifact from
// s.off to a resume (or, with Restart, the whole of it).
func (s *Stream) accept(b *Body) error {
	switch {
	case !s.started:
	case b.Offset == s.off && (s.size < 0 || b.Total < 0 || b.Total == s.size):
		return nil
	case b.Offset == 0 && s.opts.Restart != nil:
		if err := s.opts.Restart(b.Total, b.Validator); err != nil {
			return errRestart{err}
		}
	default:
		return fmt.Errorf("%w: a resume at byte %d was answered from byte %d of %d", ErrChanged, s.off, b.Offset, b.Total)
	}
	s.started, s.off, s.size, s.validator = true, b.Offset, b.Total, b.Validator
	return nil
}

// errRestart is an error of StreamOptions.Restart: it ends the stream.
type errRestart struct{ error }

func (e errRestart) Unwrap() error { return e.error }

// Read reads the next bytes, resuming across broken connections.
func (s *Stream) Read(p []byte) (int, error) {
	failures := 0
	for {
		if s.body != nil {
			n, err := s.body.Read(p)
			s.off += int64(n)
			if n > 0 {
				s.stall.Reset(s.opts.StallTimeout)
			}
			if err == io.EOF && (s.size < 0 || s.off == s.size) {
				return n, io.EOF
			}
			if err == nil || n > 0 {
				if err != nil {
					s.drop()
				}
				return n, nil
			}
			if s.off > s.size && s.size >= 0 {
				return 0, fmt.Errorf("GET %s: more bytes than the %d announced", redact(s.src.URL), s.size)
			}
			s.drop()
			if cerr := s.ctx.Err(); cerr != nil {
				return 0, cerr
			}
			s.opts.Log.Warn("image stream broke; resuming", "url", redact(s.src.URL), "offset", s.off, "err", err)
		}
		if err := s.ctx.Err(); err != nil {
			return 0, err
		}
		if failures >= s.opts.Retries {
			return 0, fmt.Errorf("GET %s: gave up after %d failed resumes at byte %d", redact(s.src.URL), failures, s.off)
		}
		failures++
		if err := clock.Sleep(s.ctx, clock.Real{}, time.Duration(failures)*s.opts.RetryDelay); err != nil {
			return 0, err
		}
		s.resumes++
		if err := s.request(); err != nil {
			if r, ok := err.(errRestart); ok {
				return 0, r.error
			}
			if errors.Is(err, ErrChanged) {
				return 0, fmt.Errorf("GET %s at byte %d: %w", redact(s.src.URL), s.off, err)
			}
			s.opts.Log.Warn("image stream resume failed", "url", redact(s.src.URL), "offset", s.off, "err", err)
		}
	}
}

// drop closes the current connection.
func (s *Stream) drop() {
	if s.body == nil {
		return
	}
	s.body.Close()
	s.stall.Stop()
	s.cancel()
	s.body = nil
}

// Abort makes a Read in progress, and every later one, fail at once. Unlike Close it
// may be called while another goroutine reads.
func (s *Stream) Abort() { s.abort() }

// Close ends the stream and releases its connection. It must not run during a Read.
func (s *Stream) Close() error {
	s.abort()
	s.drop()
	return nil
}
