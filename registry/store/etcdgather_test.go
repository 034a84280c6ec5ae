package store

import (
	"sync"
	"testing"
	"time"
)

// TestGatherWaitsForTheReleasedCallers checks the wait of a run of rounds with a longest
// wait of an hour: after a round of one it does not wait; after a round of four with one
// call waiting behind it when it told its callers (and four noted later, a caller back
// early, not counted) it waits until five wait (four are not enough) and no longer; and
// the store closing ends it with nobody coming.
func TestGatherWaitsForTheReleasedCallers(t *testing.T) {
	var mu sync.Mutex
	g := newGather()
	g.max = time.Hour
	ended := func(wait func()) chan struct{} {
		done := make(chan struct{})
		go func() {
			mu.Lock()
			wait()
			mu.Unlock()
			close(done)
		}()
		return done
	}
	returns := func(done chan struct{}, what string) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the wait did not end within 30 s", what)
		}
	}
	wantIs := func(n int) bool {
		mu.Lock()
		defer mu.Unlock()
		return g.want == n
	}
	waitsFor := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !wantIs(n); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no wait for %d calls under way within 30 s", n)
			}
		}
	}

	g.releasing(3)
	returns(ended(func() { g.wait(&mu, 1, nil) }), "after a round of one")

	g.releasing(1)
	g.releasing(4) // a released caller back before the wait: counted once
	done := ended(func() { g.wait(&mu, 4, nil) })
	waitsFor(5)
	mu.Lock()
	g.arrived(4)
	mu.Unlock()
	if !wantIs(5) {
		t.Fatal("four calls waiting ended a wait for five")
	}
	mu.Lock()
	g.arrived(5)
	mu.Unlock()
	returns(done, "five calls waiting after a round of four and one waiting")
	if !wantIs(0) || len(g.full) != 0 {
		t.Fatalf("after the wait: want %d, %d told; want none", g.want, len(g.full))
	}

	closed := make(chan struct{})
	g.releasing(0)
	done = ended(func() { g.wait(&mu, 3, closed) })
	waitsFor(3)
	close(closed)
	returns(done, "the store closed")
}
