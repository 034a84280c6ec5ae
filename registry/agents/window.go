package agents

import (
	"container/list"
	"sync"
	"time"
)

// The push window's bounds and its measure of a timely acknowledgement.
const (
	// minWindow and maxWindow bound the pushes not yet acknowledged; initialWindow is
	// where a new endpoint starts.
	minWindow, initialWindow, maxWindow = 32, 64, 4096
	// ackTarget is the longest an acknowledgement may take and still count as timely:
	// one that takes longer, or none within the ack timeout, halves the window.
	ackTarget = time.Second
)

// window bounds the NodeSpec pushes written to agents and not yet acknowledged. Its size
// follows the acknowledgements (additive increase, multiplicative decrease, as TCP's
// congestion window): each timely ack widens it, by one while it is below the size of its
// last halving (doubling each round of acks), by one per window of acks above; an ack
// later than ackTarget, or none within the ack timeout, halves it, once for all the pushes
// written before that halving. Every push ends exactly once (pushEnd), and gives its
// place back then: acknowledged, superseded by a newer generation (the newer push takes
// its place), failed to write, timed out, or its session ended.
type window struct {
	mu  sync.Mutex
	now func() time.Time
	// size is the bound, threshold the size below which it grows by one an ack.
	size, threshold float64
	inFlight        int
	// waiters wait for a place in order (chan struct{}, each given one place).
	waiters list.List
	// seq numbers the pushes as they take their place; cutSeq is the first one written
	// after the last halving.
	seq, cutSeq uint64
	// late, halvings and maxInFlight count for monitoring (PushWindow).
	late, halvings int64
	maxInFlight    int
}

// pushEnd is how a push ended.
type pushEnd int

const (
	pushAcked    pushEnd = iota // the agent acknowledged it (or a newer generation)
	pushTimedOut                // no acknowledgement within the ack timeout
	pushFailed                  // the write failed
	pushEnded                   // the session ended first
	pushUnused                  // the place was taken and not needed (a newer push won)
)

func newWindow(now func() time.Time) *window {
	return &window{now: now, size: initialWindow, threshold: maxWindow}
}

// slot is one push's place in the window: taken by acquire, given back by end.
type slot struct {
	seq    uint64
	sentAt time.Time
}

// acquire waits for a place, in the order asked, until stop or gone is closed (then
// nil).
func (w *window) acquire(stop, gone <-chan struct{}) *slot {
	w.mu.Lock()
	if w.waiters.Len() == 0 && w.inFlight < int(w.size) {
		sl := w.takeLocked()
		w.mu.Unlock()
		return sl
	}
	ch := make(chan *slot, 1)
	el := w.waiters.PushBack(ch)
	w.mu.Unlock()
	select {
	case sl := <-ch:
		return sl
	case <-stop:
	case <-gone:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case sl := <-ch: // given a place as it stopped waiting: give it back
		w.endLocked(sl, pushUnused)
	default:
		w.waiters.Remove(el)
	}
	return nil
}

func (w *window) takeLocked() *slot {
	w.inFlight++
	w.maxInFlight = max(w.maxInFlight, w.inFlight)
	w.seq++
	return &slot{seq: w.seq, sentAt: w.now()}
}

// sent restarts the slot's clock when its push is written (its wait for a place is not
// the agent's).
func (w *window) sent(sl *slot) {
	w.mu.Lock()
	sl.sentAt = w.now()
	w.mu.Unlock()
}

// end gives sl's place back and sizes the window from how its push ended.
func (w *window) end(sl *slot, how pushEnd) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.endLocked(sl, how)
}

func (w *window) endLocked(sl *slot, how pushEnd) {
	w.inFlight--
	switch {
	case how == pushAcked && w.now().Sub(sl.sentAt) <= ackTarget:
		if w.size < w.threshold {
			w.size++
		} else {
			w.size += 1 / w.size
		}
		w.size = min(w.size, maxWindow)
	case how == pushAcked || how == pushTimedOut:
		w.late++
		if sl.seq >= w.cutSeq { // once for all the pushes written before the last halving
			w.size = max(minWindow, w.size/2)
			w.threshold = w.size
			w.cutSeq = w.seq + 1
			w.halvings++
		}
	}
	for w.waiters.Len() > 0 && w.inFlight < int(w.size) {
		ch := w.waiters.Remove(w.waiters.Front()).(chan *slot)
		ch <- w.takeLocked()
	}
}

// PushWindow is the state of the endpoint's window on NodeSpec pushes not yet
// acknowledged.
type PushWindow struct {
	// InFlight pushes are written and not acknowledged; Size bounds them now, MaxInFlight
	// is the most there were at once since Start; Waiting pushes wait for a place.
	InFlight, Size, MaxInFlight, Waiting int
	// Late acknowledgements came after ackTarget (1 s) or not within the ack timeout;
	// Halvings is how often the window was halved for them.
	Late, Halvings int64
}

func (w *window) state() PushWindow {
	w.mu.Lock()
	defer w.mu.Unlock()
	return PushWindow{InFlight: w.inFlight, Size: int(w.size), MaxInFlight: w.maxInFlight, Waiting: w.waiters.Len(), Late: w.late, Halvings: w.halvings}
}
