package agents

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeNow is a clock the window tests move by hand.
type fakeNow struct{ t time.Time }

func (f *fakeNow) now() time.Time { return f.t }

func TestWindowSizedByAcks(t *testing.T) {
	clk := &fakeNow{t: time.Unix(0, 0)}
	w := newWindow(clk.now, refuseHandoff)
	closed := make(chan struct{})
	close(closed)
	var slots []*slot
	for i := range initialWindow { // two tenants, each holding its share: half the window
		sl := w.acquire([]string{"acme", "beta"}[i%2], "n", nil, nil)
		if sl == nil {
			t.Fatal("refused a place below the window's size")
		}
		slots = append(slots, sl)
	}
	if sl := w.acquire("", "n", closed, nil); sl != nil {
		t.Fatal("gave a place past the window's size")
	}
	if got := w.state(); got.InFlight != initialWindow || got.Waiting != 0 {
		t.Fatalf("full window: %+v, want %d in flight and no waiter left", got, initialWindow)
	}

	// Timely acks widen it by one each (below its threshold): those of the pushes written
	// last, with the window full, which measure the agents taking all of it.
	slots[0], slots[1], slots[initialWindow-2], slots[initialWindow-1] = slots[initialWindow-2], slots[initialWindow-1], slots[0], slots[1]
	clk.t = clk.t.Add(ackTarget / 2)
	w.end(slots[0], pushAcked)
	w.end(slots[1], pushAcked)
	if got := w.state(); got.Size != initialWindow+2 || got.InFlight != initialWindow-2 {
		t.Fatalf("after two timely acks: %+v, want size %d, %d in flight", got, initialWindow+2, initialWindow-2)
	}
	// Ends that say nothing of the agents' pace leave its size alone.
	w.end(slots[2], pushEnded)
	w.end(slots[3], pushFailed)
	w.end(slots[4], pushUnused)
	if got := w.state(); got.Size != initialWindow+2 || got.InFlight != initialWindow-5 {
		t.Fatalf("after ended, failed and unused pushes: %+v, want size %d, %d in flight", got, initialWindow+2, initialWindow-5)
	}

	// A late ack halves it, once for every push written before the halving.
	clk.t = clk.t.Add(2 * ackTarget)
	w.end(slots[5], pushAcked)
	w.end(slots[6], pushTimedOut)
	if got := w.state(); got.Size != (initialWindow+2)/2 || got.Halvings != 1 || got.Late != 2 {
		t.Fatalf("after a late ack and a timeout of the same round: %+v, want size %d, one halving, two late", got, (initialWindow+2)/2)
	}
	// A push written after the halving that times out halves it again, never below
	// minWindow.
	for _, sl := range slots[7:] {
		w.end(sl, pushUnused)
	}
	sl := w.acquire("", "n", nil, nil)
	w.end(sl, pushTimedOut)
	if got := w.state(); got.Size != minWindow || got.Halvings != 2 || got.InFlight != 0 {
		t.Fatalf("after a later timeout: %+v, want size %d, two halvings, none in flight", got, minWindow)
	}

	// Above the threshold a timely ack widens it by one per window of acks.
	for range 2 * minWindow {
		sl := w.acquire("", "n", nil, nil)
		w.end(sl, pushAcked)
	}
	if got := w.state(); got.Size != minWindow+1 && got.Size != minWindow+2 {
		t.Fatalf("after %d timely acks above the threshold: size %d, want about %d", 2*minWindow, got.Size, minWindow+2)
	}
	if got := w.state(); got.MaxInFlight != initialWindow {
		t.Fatalf("most in flight %d, want %d", got.MaxInFlight, initialWindow)
	}
}

func TestWindowWaitersInOrder(t *testing.T) {
	w := newWindow(time.Now, refuseHandoff)
	w.size = 1 // each tenant's share is one place: the waiters are of other tenants
	first := w.acquire("first", "n", nil, nil)
	got := make(chan int, 2)
	stop := make(chan struct{})
	for i := range 2 {
		go func() {
			if sl := w.acquire(fmt.Sprint(i), "n", nil, nil); sl != nil {
				got <- i
				w.end(sl, pushEnded)
			}
		}()
		waitWaiting(t, w, i+1)
	}
	// A waiter that gives up is not given a place, and takes none.
	gaveUp := make(chan *slot)
	go func() { gaveUp <- w.acquire("gave-up", "n", stop, nil) }()
	waitWaiting(t, w, 3)
	close(stop)
	if sl := <-gaveUp; sl != nil {
		t.Fatal("a waiter that stopped was given a place")
	}
	w.end(first, pushEnded) // leaves the size at one: one waiter at a time
	if a, b := <-got, <-got; a != 0 || b != 1 {
		t.Fatalf("places given in the order %d, %d, want 0, 1", a, b)
	}
	if st := w.state(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("after all ended: %+v, want none in flight or waiting", st)
	}
}

func waitWaiting(t *testing.T, w *window, n int) {
	t.Helper()
	for range 2000 {
		if w.state().Waiting == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d waiting, want %d", w.state().Waiting, n)
}

// refuseHandoff is the handoff of a window whose tests defer no node.
func refuseHandoff(queued) bool { return false }

// handoffs records the deferred nodes a window hands a place to.
type handoffs struct{ got []queued }

func (h *handoffs) hand(q queued) bool { h.got = append(h.got, q); return true }

// TestWindowShare: the agents of tenant beta never acknowledge. Alone in the window,
// beta's pushes hold all of it but an eighth; its further pushes neither wait nor take a
// place but are deferred, while those of acme, asked later, get the eighth kept free at
// once. Beside acme's, beta's pushes are held to half the window: one of them ending
// hands no deferred node a place while it holds more. Once acme's pushes are gone,
// beta's deferred nodes are handed places as its share has room, one for each place
// that frees, not all at once.
func TestWindowShare(t *testing.T) {
	var h handoffs
	w := newWindow(time.Now, h.hand)
	const alone, reserve = initialWindow - initialWindow/8, initialWindow / 8
	var beta []*slot
	for i := range initialWindow + 8 {
		if sl := w.acquire("beta", fmt.Sprintf("beta-%02d", i), nil, nil); sl != nil {
			beta = append(beta, sl)
		}
	}
	if st := w.state(); len(beta) != alone || st.InFlight != alone || st.Deferred != initialWindow+8-alone || st.Waiting != 0 {
		t.Fatalf("beta placed %d pushes, window %+v: want %d placed (all but an eighth), the rest deferred", len(beta), st, alone)
	}
	var acme []*slot
	for i := range reserve {
		sl := w.acquire("acme", fmt.Sprintf("acme-%02d", i), nil, nil)
		if sl == nil {
			t.Fatalf("acme's push %d got no place", i)
		}
		acme = append(acme, sl)
	}
	// Beside acme, beta's share is half the window: it holds more, so an ending push of
	// its own hands nothing on.
	w.end(beta[0], pushUnused)
	if len(h.got) != 0 {
		t.Fatalf("handed %v places while beta holds more than half the window beside acme", h.got)
	}
	// Alone again, beta's share is all but an eighth: it holds one place less than
	// that, and the last of acme's places to end goes to one of its deferred nodes.
	for _, sl := range acme {
		w.end(sl, pushUnused)
	}
	if st := w.state(); len(h.got) != 1 || st.InFlight != alone || st.Deferred != initialWindow+8-alone-1 {
		t.Fatalf("handed %d of beta's nodes a place as acme's pushes ended, window %+v: want 1, the room in beta's share", len(h.got), st)
	}
	// Each of beta's places that ends goes to a deferred node of beta's.
	w.end(beta[1], pushUnused)
	if st := w.state(); len(h.got) != 2 || st.InFlight != alone || st.Deferred != initialWindow+8-alone-2 {
		t.Fatalf("handed %d of beta's nodes a place, window %+v: want 2, one for each place freed", len(h.got), st)
	}
	for i, q := range h.got {
		if q.slot == nil || q.slot.tenant != "beta" {
			t.Fatalf("handed %s the place %+v, want one of beta's", q.node, q.slot)
		}
		for _, r := range h.got[:i] {
			if r.node == q.node {
				t.Fatalf("handed %s two places", q.node)
			}
		}
	}
	// Every push ending, the handed ones too once sent and acknowledged: every deferred
	// node is handed a place, and the window comes back to zero.
	for _, sl := range beta[2:] {
		w.end(sl, pushUnused)
	}
	for i := 0; i < len(h.got); i++ {
		w.end(h.got[i].slot, pushAcked)
	}
	if st := w.state(); len(h.got) != initialWindow+8-alone || st.Deferred != 0 || st.InFlight != 0 {
		t.Fatalf("handed %d of beta's nodes a place once its pushes ended, window %+v: want every deferred one", len(h.got), st)
	}
	if len(w.active) != 0 || len(w.held) != 0 {
		t.Fatalf("the window still counts tenants after every push ended: active %v, held %v", w.active, w.held)
	}
}

// TestDeferIfAtShare: a push worker asks before it reads a node's NodeSpec. Below its
// tenant's share the node is left to be read and pushed; at the share it is set aside,
// unread, and the next place of its tenant's that frees is handed to it, counted in
// flight at once: it takes no place of its own.
func TestDeferIfAtShare(t *testing.T) {
	var h handoffs
	w := newWindow(time.Now, h.hand)
	if w.deferIfAtShare("beta", "beta-first") {
		t.Fatal("a node of a tenant holding no place was set aside")
	}
	var beta []*slot
	for i := range initialWindow - initialWindow/8 {
		beta = append(beta, w.acquire("beta", fmt.Sprintf("beta-%02d", i), nil, nil))
	}
	if !w.deferIfAtShare("beta", "beta-late") {
		t.Fatal("a node of a tenant at its share was not set aside")
	}
	if st := w.state(); st.Deferred != 1 || st.InFlight != len(beta) {
		t.Fatalf("window %+v: want the node deferred and no place taken for it", st)
	}
	w.end(beta[0], pushUnused)
	if len(h.got) != 1 || h.got[0].node != "beta-late" || h.got[0].slot == nil {
		t.Fatalf("handed %v once a place of beta's ended, want beta-late with a place", h.got)
	}
	if st := w.state(); st.Deferred != 0 || st.InFlight != len(beta) {
		t.Fatalf("window %+v: want beta-late in flight in the place freed", st)
	}
}

// TestWindowHandoffRefused: a node handed a place as the endpoint closes (its push
// queue refuses it) gives the place back, and the next deferred node takes it, until
// none is left: the window comes back to zero, however many were deferred.
func TestWindowHandoffRefused(t *testing.T) {
	refused := 0
	w := newWindow(time.Now, func(queued) bool { refused++; return false })
	var beta []*slot
	for i := range initialWindow + 100 {
		if sl := w.acquire("beta", fmt.Sprintf("beta-%03d", i), nil, nil); sl != nil {
			beta = append(beta, sl)
		}
	}
	for _, sl := range beta {
		w.end(sl, pushEnded)
	}
	if st := w.state(); refused != initialWindow+100-len(beta) || st.InFlight != 0 || st.Deferred != 0 || len(w.active) != 0 {
		t.Fatalf("%d handoffs refused, window %+v, active %v: want every deferred node handed and refused, none left", refused, st, w.active)
	}
}

// TestDeferredHandedInOrder: a tenant at its share defers 40 nodes, one of them twice,
// and its places then free one at a time: each goes to the node deferred first among
// those left, the one deferred twice keeping its first turn. Before, the places went to
// the deferred nodes in map order, and a node could wait behind any number deferred after
// it.
func TestDeferredHandedInOrder(t *testing.T) {
	var h handoffs
	w := newWindow(time.Now, h.hand)
	var beta []*slot
	for i := range initialWindow - initialWindow/8 {
		beta = append(beta, w.acquire("beta", fmt.Sprintf("held-%02d", i), nil, nil))
	}
	var order []string
	for i := range 40 {
		node := fmt.Sprintf("late-%02d", i*17%40) // deferred in an order of no sort
		if !w.deferIfAtShare("beta", node) {
			t.Fatalf("%s was not deferred with beta at its share", node)
		}
		order = append(order, node)
	}
	if !w.deferIfAtShare("beta", order[0]) {
		t.Fatalf("%s, deferred again, was not set aside", order[0])
	}
	if st := w.state(); st.Deferred != len(order) {
		t.Fatalf("window %+v: want %d deferred, the node deferred twice once", st, len(order))
	}
	for i := range order {
		w.end(beta[i], pushUnused)
		if len(h.got) != i+1 {
			t.Fatalf("handed %d nodes after %d places freed, want one for each", len(h.got), i+1)
		}
	}
	var got []string
	for _, q := range h.got {
		got = append(got, q.node)
	}
	if diff := cmp.Diff(order, got); diff != "" {
		t.Fatalf("handed in another order than deferred (-deferred +handed):\n%s", diff)
	}
	for _, sl := range beta[len(order):] {
		w.end(sl, pushUnused)
	}
	for _, q := range h.got {
		w.end(q.slot, pushAcked)
	}
	if st := w.state(); st.InFlight != 0 || st.Deferred != 0 || len(w.active) != 0 || len(w.deferred) != 0 {
		t.Fatalf("window %+v, active %v, deferred %v once every push ended: want zero", st, w.active, w.deferred)
	}
}

// TestDeferredTenantsTakeTurns: a halving of the window leaves three tenants over their
// share, gamma's, alpha's and beta's nodes deferred in that order, 10 each. The places
// that free then go to their deferred nodes one tenant after another, in the order the
// tenants first deferred, each place to the tenant after the one served last: 30
// handoffs, gamma, alpha, beta, ten times over. Before, each place went to whichever
// tenant a map's iteration came to first.
func TestDeferredTenantsTakeTurns(t *testing.T) {
	var h handoffs
	w := newWindow(time.Now, h.hand)
	tenants := []string{"gamma", "alpha", "beta"} // the order they defer in, not by name
	const perTenant, deferredEach = 20, 10
	held := map[string][]*slot{}
	for _, tenant := range append(tenants, "late") {
		n := perTenant
		if tenant == "late" {
			n = initialWindow - len(tenants)*perTenant
		}
		for i := range n {
			sl := w.acquire(tenant, fmt.Sprintf("%s-held-%02d", tenant, i), nil, nil)
			if sl == nil {
				t.Fatalf("%s's push %d got no place", tenant, i)
			}
			held[tenant] = append(held[tenant], sl)
		}
	}
	// A timeout halves the window: each tenant's share is now 16 places, and each of the
	// three holds 20.
	w.end(held["late"][0], pushTimedOut)
	if st := w.state(); st.Size != initialWindow/2 || st.Halvings != 1 {
		t.Fatalf("window %+v after a timeout: want it halved", st)
	}
	for _, tenant := range tenants {
		for i := range deferredEach {
			if node := fmt.Sprintf("%s-late-%02d", tenant, i); !w.deferIfAtShare(tenant, node) {
				t.Fatalf("%s was not deferred with %s over its share", node, tenant)
			}
		}
	}
	// The pushes end until the three hold 10, 10 and 12 places and the window is full but
	// for none: nothing is handed yet.
	for _, sl := range held["late"][1:] {
		w.end(sl, pushUnused)
	}
	for tenant, keep := range map[string]int{"gamma": 10, "alpha": 10, "beta": 12} {
		for _, sl := range held[tenant][keep:] {
			w.end(sl, pushUnused)
		}
		held[tenant] = held[tenant][:keep]
	}
	if st := w.state(); len(h.got) != 0 || st.InFlight != st.Size {
		t.Fatalf("handed %v, window %+v: want nothing handed while the window is full", h.got, st)
	}
	// Each place that frees now goes to a deferred node; each handed node's push ends in
	// turn.
	w.end(held["beta"][0], pushUnused)
	for len(h.got) < len(tenants)*deferredEach {
		n := len(h.got)
		w.end(h.got[n-1].slot, pushUnused)
		if len(h.got) != n+1 {
			t.Fatalf("%d handed after a place freed with %d handed before, want one more", len(h.got), n)
		}
	}
	var got, want []string
	for i, q := range h.got {
		if q.slot == nil || q.slot.tenant+"-late" != q.node[:len(q.node)-3] {
			t.Fatalf("handed %s the place %+v, want one of its tenant's", q.node, q.slot)
		}
		got = append(got, q.slot.tenant)
		want = append(want, tenants[i%len(tenants)])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("the tenants handed places in another order than in turns (-want +got):\n%s", diff)
	}
	if st := w.state(); st.Deferred != 0 {
		t.Fatalf("window %+v: want nothing deferred", st)
	}
}

// agentPool is a fleet that acknowledges pushes at a fixed rate: each push takes base to
// reach an agent and come back, and the fleet serves one push each per, in the order
// written, so that pushes beyond what it takes in base wait in its queue and their
// acknowledgements come later the more are in flight.
type agentPool struct {
	base, per time.Duration
	last      time.Time // when the last push written is served
	acks      []poolAck // in the order they come
}

type poolAck struct {
	at time.Time
	sl *slot
}

// capacity is the pushes the pool takes in its base time: what the window needs to keep
// it busy.
func (p *agentPool) capacity() int { return int(p.base / p.per) }

func (p *agentPool) write(now time.Time, sl *slot) {
	p.last = p.last.Add(p.per)
	if reach := now.Add(p.base); reach.After(p.last) {
		p.last = reach
	}
	p.acks = append(p.acks, poolAck{p.last, sl})
}

// TestWindowHoldsToAgentPool: a window pushing to a pool of agents that acknowledges at
// a fixed rate grows to keep the pool busy and stops within ackGain times what it takes
// in its fastest acknowledgement time, however long the push: its acknowledgements come
// later as more are in flight, well before they are late (ackTarget), so the window
// must not wait for a late one to stop.
func TestWindowHoldsToAgentPool(t *testing.T) {
	clk := &fakeNow{t: time.Unix(0, 0)}
	pool := &agentPool{base: 40 * time.Millisecond, per: 100 * time.Microsecond}
	const pushes = 100000
	sent, node := 0, 0
	var w *window
	w = newWindow(clk.now, func(q queued) bool { // a deferred node sent in its place
		w.sent(q.slot)
		pool.write(clk.t, q.slot)
		sent++
		return true
	})
	for acked := 0; acked < pushes; {
		for sent < pushes { // write every push the window takes now
			node++
			sl := w.acquire("acme", fmt.Sprint(node), closedChan, nil)
			if sl == nil {
				break // the window is full, or the node is deferred until a place frees
			}
			w.sent(sl)
			pool.write(clk.t, sl)
			sent++
		}
		if len(pool.acks) == 0 {
			t.Fatalf("nothing in flight with %d of %d pushes acknowledged: %+v", acked, pushes, w.state())
		}
		next := pool.acks[0]
		pool.acks = pool.acks[1:]
		clk.t = next.at
		w.end(next.sl, pushAcked)
		acked++
	}
	st := w.state()
	t.Logf("window after %d pushes to a pool that takes %d in its base time: %+v", pushes, pool.capacity(), st)
	if st.Late != 0 {
		t.Fatalf("window %+v: want no late acknowledgement from a pool that serves within %v", st, time.Duration(st.MaxInFlight)*pool.per)
	}
	limit := ackGain * (pool.capacity() + 1)
	if st.MaxInFlight > limit || st.Size > limit {
		t.Fatalf("window %+v over a pool that takes %d pushes in its base time: want at most %d", st, pool.capacity(), limit)
	}
	if st.MaxInFlight < pool.capacity() {
		t.Fatalf("window %+v: at most %d in flight, fewer than the %d the pool takes in its base time", st, st.MaxInFlight, pool.capacity())
	}
	if st.InFlight != 0 {
		t.Fatalf("window %+v after every push was acknowledged: want none in flight", st)
	}
}

// closedChan stops a wait for a place at once.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
