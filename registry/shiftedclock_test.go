package registry

import (
	"sync"
	"time"

	"github.com/better-compute/better-compute/clock"
)

// shiftedClock is the registry's clock in the busy tests that let days pass while the
// fleet works: the real time shifted by an offset that Advance moves forward, firing at
// once the timers that came due (the housekeeping's, the lease's...). Between advances it
// runs at the real pace, and its timers fire when their time comes by the real clock too,
// so the registry's waits (step timeouts, the lease's renewals) behave as on clock.Real.
type shiftedClock struct {
	mu     sync.Mutex
	offset time.Duration
	timers map[*shiftedTimer]struct{}
}

type shiftedTimer struct {
	clk  *shiftedClock
	at   time.Time
	d    time.Duration
	c    chan time.Time
	real *time.Timer
}

// newShiftedClock is a clock offset from the real time (negative: in the past).
func newShiftedClock(offset time.Duration) *shiftedClock {
	return &shiftedClock{offset: offset, timers: map[*shiftedTimer]struct{}{}}
}

func (s *shiftedClock) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Now().Add(s.offset)
}

func (s *shiftedClock) NewTimer(d time.Duration) clock.Timer {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &shiftedTimer{clk: s, at: time.Now().Add(s.offset + d), d: d, c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- t.at
		return t
	}
	s.timers[t] = struct{}{}
	t.real = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.fire(t)
	})
	return t
}

func (s *shiftedClock) After(d time.Duration) <-chan time.Time { return s.NewTimer(d).C() }

// fire sends the time on t's channel unless it fired or was stopped; s.mu is held.
func (s *shiftedClock) fire(t *shiftedTimer) {
	if _, ok := s.timers[t]; !ok {
		return
	}
	delete(s.timers, t)
	t.c <- time.Now().Add(s.offset)
}

// Advance moves the clock d forward, fires every timer whose time has come and returns
// the time it reads now.
func (s *shiftedClock) Advance(d time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offset += d
	now := time.Now().Add(s.offset)
	for t := range s.timers {
		if !t.at.After(now) {
			t.real.Stop()
			s.fire(t)
		}
	}
	return now
}

// armed is how many timers of duration d wait to fire.
func (s *shiftedClock) armed(d time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for t := range s.timers {
		if t.d == d {
			n++
		}
	}
	return n
}

func (t *shiftedTimer) C() <-chan time.Time { return t.c }

func (t *shiftedTimer) Stop() bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	_, ok := t.clk.timers[t]
	delete(t.clk.timers, t)
	if t.real != nil {
		t.real.Stop()
	}
	return ok
}
