// Package throttle bounds the bandwidth a site's pulls take together: one token bucket,
// shared by every pull, refilled at a rate in bytes per second.
package throttle

import (
	"context"
	"sync"
	"time"

	"github.com/better-compute/better-compute/clock"
)

// Bucket is a token bucket of bytes. A nil *Bucket does not limit.
type Bucket struct {
	clock clock.Clock
	rate  float64 // bytes per second
	burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// New returns a bucket that lets rate bytes a second through, and at most burst at once
// after a quiet spell. It starts full.
func New(c clock.Clock, rate, burst int64) *Bucket {
	return &Bucket{clock: c, rate: float64(rate), burst: float64(burst), tokens: float64(burst), last: c.Now()}
}

// Burst is the most Wait may be asked for at once; a nil bucket has no bound.
func (b *Bucket) Burst() int64 {
	if b == nil {
		return 1 << 62
	}
	return int64(b.burst)
}

// Wait blocks until n bytes (n <= Burst) may pass, or ctx is done. Callers are served in
// the order they asked: each takes its tokens at once, going into debt, and sleeps until
// the debt is paid, so the sum over all callers never passes the rate.
func (b *Bucket) Wait(ctx context.Context, n int64) error {
	if b == nil {
		return ctx.Err()
	}
	d := b.reserve(n)
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.clock.After(d):
		return nil
	}
}

// reserve takes n tokens now and returns how long to wait before using them.
func (b *Bucket) reserve(n int64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(b.burst, b.tokens+el.Seconds()*b.rate)
		b.last = now
	}
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}
