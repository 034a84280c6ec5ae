package session

import (
	"math/rand/v2"
	"time"
)

// Backoff is the reconnect policy: exponential delays with jitter, so that agents that
// lost the registry together do not come back together.
type Backoff struct {
	// Min is the delay before the first retry (DefaultMinBackoff when zero).
	Min time.Duration
	// Max caps the delay (DefaultMaxBackoff when zero).
	Max time.Duration
	// Rand returns a number in [0, 1); math/rand/v2's Float64 when nil.
	Rand func() float64
}

// The default reconnect delays.
const (
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// Delay is the wait before retry number attempt (0 for the first): the exponential step
// min(Max, Min*2^attempt), of which a random half is taken off ("equal jitter").
func (b Backoff) Delay(attempt int) time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = DefaultMinBackoff
	}
	if hi <= 0 {
		hi = DefaultMaxBackoff
	}
	step := hi
	if attempt < 62 && lo<<attempt>>attempt == lo && lo<<attempt < hi {
		step = lo << attempt
	}
	return step/2 + b.within(step/2)
}

// within is a uniformly random wait shorter than d.
func (b Backoff) within(d time.Duration) time.Duration {
	r := rand.Float64
	if b.Rand != nil {
		r = b.Rand
	}
	return time.Duration(r() * float64(d))
}
