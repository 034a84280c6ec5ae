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
	// ackGain is how many times what the agents take in their fastest acknowledgement
	// time (the delivery rate times minAck) the window may grow to; minAckSpan is how
	// long a fastest acknowledgement time stands before a newer one replaces it.
	ackGain, minAckSpan = 2, 10 * time.Second
)

// window bounds the NodeSpec pushes written to agents and not yet acknowledged. Its size
// follows the acknowledgements (additive increase, multiplicative decrease, as TCP's
// congestion window): each timely ack widens it, by one while it is below the size of its
// last halving (doubling each round of acks), by one per window of acks above; an ack
// later than ackTarget, or none within the ack timeout, halves it, once for all the pushes
// written before that halving. A timely ack widens it only while it is below what the
// agents take (growthLimitLocked): ackGain times the delivery rate the ack measures (the
// pushes in flight over its acknowledgement time) times the fastest acknowledgement time
// of the last minAckSpan, as BBR bounds its congestion window. Pushes beyond that wait in
// the agents' queues and only lengthen the acknowledgement times, so the window stops
// growing when they start to queue rather than once they are late. Every push ends
// exactly once (pushEnd), and gives its place back then: acknowledged, superseded by a
// newer generation (the newer push takes its place), failed to write, timed out, or its
// session ended.
//
// The pushes to one tenant's agents hold at most their tenant's share of the window
// (capLocked): half of it while another tenant's pushes hold places, wait or are
// deferred, and alone all of it but an eighth, kept free for another tenant's push to
// take at once. So a tenant whose agents never acknowledge, however many machines it
// has, cannot hold the places every other tenant's pushes wait for, and a fleet of one
// tenant still pushes through nearly the whole window. A push of a tenant at its share
// does not wait (a push worker waiting would hold every other tenant's pushes behind
// it): its node is deferred, unread, and a place that frees goes to it directly once the
// waiters are served and its tenant's share has room (the tenants' deferred nodes taking
// turns, round robin in the order the tenants deferred, each tenant's first deferred
// first): the node is handed, with its place, to handoff, which reads its newest
// NodeSpec and sends it in that place, without going through the push queue again.
type window struct {
	mu  sync.Mutex
	now func() time.Time
	// size is the bound, threshold the size below which it grows by one an ack.
	size, threshold float64
	inFlight        int
	// held counts the places each tenant's pushes hold; deferred are the nodes whose push
	// found their tenant at its share, by tenant, in the order deferred; active counts, by
	// tenant, its places, waiting pushes and deferred nodes together (a tenant with none
	// is not in it).
	held     map[string]int
	deferred map[string]*deferredNodes
	active   map[string]int
	// turns are the tenants with deferred nodes (*deferredNodes), in the order they take
	// turns for a freed place: a tenant's first deferral puts it last in the round. next
	// is the tenant whose turn comes next, the one after the tenant served last (nil: the
	// first).
	turns list.List
	next  *list.Element
	// handoff is given a deferred node with the place it was given, outside mu; false
	// when the node cannot be pushed (the endpoint is closing), and the place is given
	// back. handing are the nodes given a place under mu, for handoff once it is released.
	handoff func(q queued) bool
	handing []queued
	// waiters wait for a place in order (*waiter, each given one place).
	waiters list.List
	// seq numbers the pushes as they take their place; cutSeq is the first one written
	// after the last halving.
	seq, cutSeq uint64
	// minAck is the fastest acknowledgement time since minAckAt, replaced by the next one
	// once minAckSpan has passed (0: none yet).
	minAck   time.Duration
	minAckAt time.Time
	// late, halvings, limited and maxInFlight count for monitoring (PushWindow); limited: the
	// timely acks that found the window at its growth limit.
	late, halvings, limited int64
	maxInFlight             int
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

func newWindow(now func() time.Time, handoff func(q queued) bool) *window {
	return &window{now: now, size: initialWindow, threshold: maxWindow, held: map[string]int{},
		deferred: map[string]*deferredNodes{}, active: map[string]int{}, handoff: handoff}
}

// deferredNodes are one tenant's deferred nodes, first deferred first: a node deferred
// again while it waits keeps its turn.
type deferredNodes struct {
	tenant string
	order  []string
	in     map[string]bool
}

// queued is a node to push and, when it was deferred and a place freed for it, that
// place (nil otherwise: the push takes one, or is deferred, when it is sent).
type queued struct {
	node string
	slot *slot
}

// slot is one push's place in the window: taken by acquire, given back by end. flight
// is the pushes in flight, its own among them, when it was taken or written.
type slot struct {
	seq    uint64
	sentAt time.Time
	tenant string
	flight int
}

// waiter is a push waiting for a place for node, an agent of tenant.
type waiter struct {
	tenant, node string
	ch           chan *slot
}

// capLocked is the most places tenant's pushes may hold now: half the window (at least
// one) while another tenant is active, else all of it but an eighth (at least one).
func (w *window) capLocked(tenant string) int {
	if others := len(w.active); others > 1 || (others == 1 && w.active[tenant] == 0) {
		return max(1, int(w.size)/2)
	}
	return max(1, int(w.size)-max(1, int(w.size)/8))
}

// activeLocked adds d to what tenant has in the window (active).
func (w *window) activeLocked(tenant string, d int) {
	if w.active[tenant] += d; w.active[tenant] <= 0 {
		delete(w.active, tenant)
	}
}

// acquire waits for a place for a push to node, an agent of tenant ("" for the
// platform's site agents), in the order asked, until stop or gone is closed (then nil).
// When tenant's pushes hold their share it defers node and returns nil at once.
func (w *window) acquire(tenant, node string, stop, gone <-chan struct{}) *slot {
	w.mu.Lock()
	if w.deferAtShareLocked(tenant, node) {
		w.mu.Unlock()
		return nil
	}
	if w.waiters.Len() == 0 && w.inFlight < int(w.size) {
		sl := w.takeLocked(tenant)
		w.mu.Unlock()
		return sl
	}
	ch := make(chan *slot, 1)
	el := w.waiters.PushBack(&waiter{tenant: tenant, node: node, ch: ch})
	w.activeLocked(tenant, 1)
	w.grantLocked()
	w.unlock()
	select {
	case sl := <-ch:
		return sl
	case <-stop:
	case <-gone:
	}
	w.mu.Lock()
	select {
	case sl := <-ch: // given a place (or deferred) as it stopped waiting: give it back
		w.mu.Unlock()
		w.release(sl)
	default:
		w.waiters.Remove(el)
		w.activeLocked(tenant, -1)
		w.mu.Unlock()
	}
	return nil
}

// deferIfAtShare defers node, an agent of tenant, when tenant's pushes hold their
// share, as acquire would, and reports whether it did: a push worker asks before it
// reads the node's NodeSpec, so that a node set aside is read once, when it is handed a
// place.
func (w *window) deferIfAtShare(tenant, node string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deferAtShareLocked(tenant, node)
}

// deferAtShareLocked defers node, an agent of tenant, when tenant's pushes hold their
// share (capLocked), and reports whether it did.
func (w *window) deferAtShareLocked(tenant, node string) bool {
	if w.held[tenant] < w.capLocked(tenant) {
		return false
	}
	w.deferLocked(tenant, node)
	return true
}

func (w *window) takeLocked(tenant string) *slot {
	w.inFlight++
	w.held[tenant]++
	w.activeLocked(tenant, 1)
	w.maxInFlight = max(w.maxInFlight, w.inFlight)
	w.seq++
	return &slot{seq: w.seq, sentAt: w.now(), tenant: tenant, flight: w.inFlight}
}

// grantLocked gives the free places to the waiters in order; a waiter whose tenant's
// pushes came to hold their share while it waited is deferred instead (given nil). The
// places left go to the deferred nodes (handDeferredLocked).
func (w *window) grantLocked() {
	for w.waiters.Len() > 0 && w.inFlight < int(w.size) {
		wt := w.waiters.Remove(w.waiters.Front()).(*waiter)
		w.activeLocked(wt.tenant, -1)
		if w.deferAtShareLocked(wt.tenant, wt.node) {
			wt.ch <- nil
			continue
		}
		wt.ch <- w.takeLocked(wt.tenant)
	}
	w.handDeferredLocked()
}

// handDeferredLocked gives the free places to the deferred nodes, the tenants whose
// share has room taking turns, one node a turn (a tenant at its share passes its turn),
// each tenant's in the order they were deferred, for handoff (handing) once mu is
// released. It stops when the window is full, or when a whole round passed with no turn
// taken.
func (w *window) handDeferredLocked() {
	for passed := 0; passed < w.turns.Len() && w.inFlight < int(w.size); {
		el := w.next
		if el == nil {
			el = w.turns.Front()
		}
		w.next = el.Next()
		nodes := el.Value.(*deferredNodes)
		if w.held[nodes.tenant] >= w.capLocked(nodes.tenant) {
			passed++
			continue
		}
		passed = 0
		node := nodes.order[0]
		nodes.order[0], nodes.order = "", nodes.order[1:]
		delete(nodes.in, node)
		w.handing = append(w.handing, queued{node, w.takeLocked(nodes.tenant)})
		w.activeLocked(nodes.tenant, -1)
		if len(nodes.order) == 0 {
			w.turns.Remove(el)
			delete(w.deferred, nodes.tenant)
		}
	}
}

// unlock releases mu and hands the nodes given a place under it to handoff; the place of
// one it refuses is given back (which may hand it to another).
func (w *window) unlock() {
	for len(w.handing) > 0 {
		handing := w.handing
		w.handing = nil
		w.mu.Unlock()
		var refused []*slot
		for _, q := range handing {
			if !w.handoff(q) {
				refused = append(refused, q.slot)
			}
		}
		w.mu.Lock()
		for _, sl := range refused {
			w.endLocked(sl, pushUnused)
		}
	}
	w.mu.Unlock()
}

// deferLocked sets node, an agent of tenant, aside at the end of its tenant's deferred
// nodes, unless it is among them already.
func (w *window) deferLocked(tenant, node string) {
	nodes := w.deferred[tenant]
	if nodes == nil {
		nodes = &deferredNodes{tenant: tenant, in: map[string]bool{}}
		w.deferred[tenant] = nodes
		if w.next != nil { // last in the round that starts at next
			w.turns.InsertBefore(nodes, w.next)
		} else {
			w.turns.PushBack(nodes)
		}
	}
	if !nodes.in[node] {
		nodes.in[node] = true
		nodes.order = append(nodes.order, node)
		w.activeLocked(tenant, 1)
	}
}

// release gives back sl, a place taken and not used, if any.
func (w *window) release(sl *slot) {
	if sl != nil {
		w.end(sl, pushUnused)
	}
}

// sent restarts the slot's clock when its push is written (its wait for a place is not
// the agent's), and notes the pushes in flight then.
func (w *window) sent(sl *slot) {
	w.mu.Lock()
	sl.sentAt, sl.flight = w.now(), w.inFlight
	w.mu.Unlock()
}

// end gives sl's place back and sizes the window from how its push ended; the place
// goes to a waiter or a deferred node (grantLocked).
func (w *window) end(sl *slot, how pushEnd) {
	w.mu.Lock()
	w.endLocked(sl, how)
	w.unlock()
}

func (w *window) endLocked(sl *slot, how pushEnd) {
	w.inFlight--
	if w.held[sl.tenant]--; w.held[sl.tenant] == 0 {
		delete(w.held, sl.tenant)
	}
	w.activeLocked(sl.tenant, -1)
	switch took := w.now().Sub(sl.sentAt); {
	case how == pushAcked && took <= ackTarget:
		if limit := w.growthLimitLocked(took, sl.flight); w.size >= limit {
			w.limited++
		} else if w.size < w.threshold {
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
	w.grantLocked()
}

// growthLimitLocked notes took, the time a push written with flight pushes in flight
// (itself among them) took to be acknowledged, and returns the size the window may grow
// to: ackGain times the pushes the agents deliver in the fastest acknowledgement time
// (flight/took, the delivery rate, times minAck), at least initialWindow. The pushes in
// flight when it was written, all acknowledged within took, measure the rate; those in
// flight now would count the window's own growth since. When the agents keep up, took is
// near minAck and the limit is ackGain times the pushes in flight, so the window still
// doubles each round; when pushes queue, took grows with flight and the limit stays at
// ackGain times what the agents take, however many are in flight.
func (w *window) growthLimitLocked(took time.Duration, flight int) float64 {
	now := w.now()
	if w.minAck == 0 || took <= w.minAck || now.Sub(w.minAckAt) > minAckSpan {
		w.minAck, w.minAckAt = max(took, 1), now
	}
	return max(initialWindow, ackGain*float64(flight)*float64(w.minAck)/float64(max(took, 1)))
}

// PushWindow is the state of the endpoint's window on NodeSpec pushes not yet
// acknowledged.
type PushWindow struct {
	// InFlight pushes are written and not acknowledged; Size bounds them now, MaxInFlight
	// is the most there were at once since Start; Waiting pushes wait for a place.
	InFlight, Size, MaxInFlight, Waiting int
	// Deferred pushes found their tenant's pushes holding its share (half the window
	// beside another tenant's, seven eighths alone): each is given a place that frees
	// once its tenant's share has room.
	Deferred int
	// Late acknowledgements came after ackTarget (1 s) or not within the ack timeout;
	// Halvings is how often the window was halved for them. Limited timely
	// acknowledgements found the window at what the agents take (ackGain times their
	// delivery rate times the fastest acknowledgement time) and did not widen it.
	Late, Halvings, Limited int64
}

func (w *window) state() PushWindow {
	w.mu.Lock()
	defer w.mu.Unlock()
	deferred := 0
	for _, nodes := range w.deferred {
		deferred += len(nodes.order)
	}
	return PushWindow{InFlight: w.inFlight, Size: int(w.size), MaxInFlight: w.maxInFlight, Waiting: w.waiters.Len(), Deferred: deferred,
		Late: w.late, Halvings: w.halvings, Limited: w.limited}
}
