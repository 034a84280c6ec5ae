// Package clock is the injected time of the registry and the agents alike. Logic that
// reads the time or waits (step timeouts, retry backoff, leases, periods, bandwidth)
// takes a Clock, or a smaller interface of its own that a Clock satisfies: Real in the
// binaries, Fake in tests, which advance it by hand and can wait until the code under
// test is waiting on it. Sleep waits on a Clock until a duration passes or a context
// ends. It imports nothing of the project.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d has passed. A d
	// of zero or less sends at once.
	NewTimer(d time.Duration) Timer
	// After is NewTimer(d).C() for a wait that is never stopped.
	After(d time.Duration) <-chan time.Time
}

// Timer is a running timer.
type Timer interface {
	// C is the channel the time is sent on, once.
	C() <-chan time.Time
	// Stop stops a timer that has not fired; it reports whether it did.
	Stop() bool
}

// Real is the system clock.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// NewTimer is time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// After is time.After.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }
