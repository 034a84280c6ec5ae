package agents

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPushQueue(t *testing.T) {
	var q pushQueue
	q.init()
	for _, n := range []string{"a", "b", "a", "c", "b"} {
		q.add(n)
	}
	first := q.take(2)
	rest := q.take(10)
	var got []string
	for _, n := range append(first, rest...) {
		if n.slot != nil {
			t.Errorf("queued node %s came with a place", n.node)
		}
		got = append(got, n.node)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"a", "b", "c"}, got); diff != "" {
		t.Errorf("taken once each (-want +got):\n%s", diff)
	}
	if len(first) != 2 {
		t.Errorf("first take: %v, want 2 nodes", first)
	}
	done := make(chan []queued)
	go func() { done <- q.take(10) }()
	q.close()
	if got := <-done; got != nil {
		t.Errorf("take after close: %v", got)
	}
}

// TestPushQueueCloseWhileTaking closes queues while a worker takes from them with nodes
// left for another worker: the take that wakes the other worker for them must not send
// on the wake channel close closed (a panic ending the registry as it stops). The two
// meet in that moment only now and then on their own, once in about a million tries; the
// test makes them meet each time: on one processor, take and then close wait for the
// queue's lock long enough that sync.Mutex hands it over in turn, and an unlock that
// hands it over yields to the next waiter at once, so close runs entirely between take's
// unlock and whatever take does after it.
func TestPushQueueCloseWhileTaking(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for range 200 {
		var q pushQueue
		q.init()
		q.add("a")
		q.add("b")
		<-q.wake // taken: the take's own signal is what would meet the close
		var wg sync.WaitGroup
		q.mu.Lock()
		wg.Go(func() { q.take(1) })
		runtime.Gosched() // take waits for the lock
		wg.Go(func() { q.close() })
		runtime.Gosched() // and close behind it
		// Past the 1 ms after which a waiter woken to find the lock held again puts the
		// mutex in starvation mode, where it goes to each waiter in turn.
		time.Sleep(2 * time.Millisecond)
		q.mu.Unlock()
		q.mu.Lock() // before take, woken, can take it
		runtime.Gosched()
		q.mu.Unlock() // to take, whose unlock hands it to close
		wg.Wait()
	}
}

// TestPushQueueHanded: the deferred nodes handed a place are taken before the queued
// ones, with their place; those no worker took are returned by close, for their places
// to be given back, and the closed queue refuses any handed later.
func TestPushQueueHanded(t *testing.T) {
	var q pushQueue
	q.init()
	e, f := queued{"e", &slot{seq: 1}}, queued{"f", &slot{seq: 2}}
	q.add("d")
	if !q.hand(e) || !q.hand(f) {
		t.Fatal("the open queue refused a handed node")
	}
	if got := q.take(1); !slices.Equal(got, []queued{e}) {
		t.Errorf("take(1) of two handed nodes and a queued one: %v, want the first handed", got)
	}
	if got := q.close(); !slices.Equal(got, []queued{f}) {
		t.Errorf("close returned %v, want the handed node not taken", got)
	}
	if q.hand(queued{"g", &slot{}}) {
		t.Error("the closed queue took a handed node")
	}
}

// TestPushQueuePutBack: the nodes of a read that failed go back to the queue, the handed
// ones with their places and before those handed since, and the workers are held back
// for a pause that starts at pushRetryMin and doubles with each failure in a row up to
// pushRetryMax; the streak is reported begun once, and ended once by a read that works,
// after which the pause starts again from the shortest. Every failed read is counted
// (better_compute_agent_nodespec_read_failures_total), the count going on across streaks.
func TestPushQueuePutBack(t *testing.T) {
	var q pushQueue
	q.init()
	e, f := queued{"e", &slot{seq: 1}}, queued{"f", &slot{seq: 2}}
	q.add("a")
	q.hand(e)
	taken := q.take(10)
	q.hand(f)
	t0 := time.Unix(0, 0) // long past: the pauses have passed when take is called
	pause, first, refused := q.putBack(taken, t0)
	if pause != pushRetryMin || !first || refused != nil {
		t.Fatalf("first failure: pause %v, first %v, refused %v; want %v, true, none", pause, first, refused, pushRetryMin)
	}
	var pauses []time.Duration
	for range 6 {
		pause, first, _ := q.putBack(nil, t0)
		if first {
			t.Fatal("a failure after another reported as the first of a streak")
		}
		pauses = append(pauses, pause)
	}
	want := []time.Duration{2 * pushRetryMin, 4 * pushRetryMin, 8 * pushRetryMin, 16 * pushRetryMin, pushRetryMax, pushRetryMax}
	if diff := cmp.Diff(want, pauses); diff != "" {
		t.Fatalf("pauses of the failures in a row (-want +got):\n%s", diff)
	}
	if got := q.take(10); !slices.Equal(got, []queued{e, f, {node: "a"}}) {
		t.Fatalf("taken after the pause: %v, want e and f with their places, then a", got)
	}
	if failures, lasted := q.readWorked(t0.Add(time.Minute)); failures != 7 || lasted != time.Minute {
		t.Fatalf("streak ended: %d failures over %v, want 7 over a minute", failures, lasted)
	}
	if failures, _ := q.readWorked(t0.Add(time.Hour)); failures != 0 {
		t.Fatalf("a read that worked with no streak reported %d failures", failures)
	}
	if n := q.readFailures(); n != 7 {
		t.Fatalf("%d failed reads counted after the streak, want its 7", n)
	}
	if pause, first, _ := q.putBack(nil, t0); pause != pushRetryMin || !first {
		t.Fatalf("after the streak ended: pause %v, first %v; want %v, a new streak", pause, first, pushRetryMin)
	}
	if n := q.readFailures(); n != 8 {
		t.Fatalf("%d failed reads counted, want 8: the count goes on across streaks", n)
	}

	// During a pause no node is taken, however many are added; close ends the wait.
	q.putBack([]queued{{node: "b"}}, time.Now().Add(time.Hour)) // a pause that lasts past the test
	done := make(chan []queued)
	go func() { done <- q.take(10) }()
	q.add("c")
	time.Sleep(50 * time.Millisecond) // time for a take that ignored the pause to return
	q.close()
	if got := <-done; got != nil {
		t.Fatalf("taken during the pause: %v", got)
	}
	// A closed queue keeps no node put back: the handed ones' places are to be given back.
	if _, _, refused := q.putBack([]queued{{node: "d"}, e}, time.Now()); !slices.Equal(refused, []queued{e}) {
		t.Fatalf("closed queue returned %v, want the handed node", refused)
	}
}

// TestHandedPlacesThroughAFailedRead: deferred nodes handed places whose read failed keep
// them while the workers pause (the places are not given to other deferred nodes, nor
// lost), and the endpoint's close gives them back: the window comes back to zero.
func TestHandedPlacesThroughAFailedRead(t *testing.T) {
	var q pushQueue
	q.init()
	w := newWindow(time.Now, q.hand)
	var beta []*slot
	for i := range initialWindow - initialWindow/8 {
		beta = append(beta, w.acquire("beta", fmt.Sprintf("held-%02d", i), nil, nil))
	}
	for i := range 5 {
		w.deferIfAtShare("beta", fmt.Sprintf("late-%d", i))
	}
	for _, sl := range beta[:3] {
		w.end(sl, pushUnused) // leaves the window's size, and so beta's share, alone
	}
	taken := q.take(pushBatch)
	if len(taken) != 3 {
		t.Fatalf("took %v, want the 3 nodes handed a place", taken)
	}
	q.putBack(taken, time.Now())
	if st := w.state(); st.InFlight != len(beta) || st.Deferred != 2 {
		t.Fatalf("window %+v after the read failed: want the 3 handed places still held, 2 nodes still deferred", st)
	}
	for _, sl := range beta[3:] {
		w.end(sl, pushUnused) // hands the 2 deferred nodes places too
	}
	for _, h := range q.close() { // as Endpoint.Close does
		w.release(h.slot)
	}
	if st := w.state(); st.InFlight != 0 || st.Deferred != 0 || len(w.active) != 0 || len(w.held) != 0 {
		t.Fatalf("window %+v, active %v, held %v after close: want zero", st, w.active, w.held)
	}
}
