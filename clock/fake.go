package clock

import (
	"slices"
	"sync"
	"time"
)

// Fake is a clock that moves only when told to. Make one with NewFake.
type Fake struct {
	mu      sync.Mutex
	cond    *sync.Cond
	now     time.Time
	waiters []*fakeTimer
}

type fakeTimer struct {
	f  *Fake
	at time.Time
	c  chan time.Time
}

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake {
	f := &Fake{now: start}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires once Advance has moved the clock d or more past
// now.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.now
		return t
	}
	f.waiters = append(f.waiters, t)
	f.cond.Broadcast()
	return t
}

// After returns the channel of a new timer of d, which is never stopped.
func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	i := slices.Index(t.f.waiters, t)
	if i < 0 {
		return false
	}
	t.f.waiters = slices.Delete(t.f.waiters, i, i+1)
	t.f.cond.Broadcast()
	return true
}

// Advance moves the clock d forward and fires every timer whose time has come.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if w.at.After(f.now) {
			kept = append(kept, w)
			continue
		}
		w.c <- f.now
	}
	clear(f.waiters[len(kept):])
	f.waiters = kept
	f.cond.Broadcast()
}

// Waiters is the number of timers that have neither fired nor been stopped.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// BlockUntil returns once at least n timers are waiting to fire.
func (f *Fake) BlockUntil(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.waiters) < n {
		f.cond.Wait()
	}
}
