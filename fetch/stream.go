package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
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

// Stream is an artifact's bytes, read in order from the first to the last as one stream
// that survives broken connections: when the body breaks off, it asks again from the
// byte it had reached (Client.Open with the first answer's validator), so the reader
// above it never sees the break and never reads a byte twice.
type Stream struct {
	ctx    context.Context
	abort  context.CancelFunc
	client *Client
	src    Source
	opts   StreamOptions

	body   *Body
	cancel context.CancelFunc
	stall  *time.Timer

	off       int64
	size      int64
	validator string
	resumes   int
}

// Stream asks for src from its first byte and returns the stream once the server has
// sent the artifact whole.
func (c *Client) Stream(ctx context.Context, src Source, opts StreamOptions) (*Stream, error) {
	ctx, abort := context.WithCancel(ctx)
	s := &Stream{ctx: ctx, abort: abort, client: c, src: src, opts: opts.withDefaults(), size: -1}
	if err := s.request(); err != nil {
		abort()
		return nil, err
	}
	return s, nil
}

// Size is the artifact's length as the server announced it, or -1.
func (s *Stream) Size() int64 { return s.size }

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

// accept checks an answer: the whole artifact to the first request, the rest of the
// same artifact from s.off to a resume.
func (s *Stream) accept(b *Body) error {
	if s.off == 0 {
		s.size, s.validator = b.Total, b.Validator
		return nil
	}
	if b.Offset != s.off || (s.size >= 0 && b.Total >= 0 && b.Total != s.size) {
		return fmt.Errorf("%w: a resume at byte %d was answered from byte %d of %d", ErrChanged, s.off, b.Offset, b.Total)
	}
	return nil
}

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
		if err := sleep(s.ctx, time.Duration(failures)*s.opts.RetryDelay); err != nil {
			return 0, err
		}
		s.resumes++
		if err := s.request(); err != nil {
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
