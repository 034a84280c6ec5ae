package boot

import (
	"container/heap"
	"context"
	"net/netip"
	"sync"
	"time"
)

// downloadGate lets a bounded number of ramdisk downloads send at once and hands the
// places out by machine, oldest first: a waiting download goes before others when its
// machine (its client address) asked for its first file earlier. In a boot storm a
// thousand machines reach HTTP within seconds; shared evenly, every download then ends
// near the storm's end, and half the machines have their kernel and initrd only when
// nearly all have. In the gate's order the first machines finish first, the last no
// later than before, and a machine's second file (the initrd after the kernel) does not
// queue behind every other machine's first.
//
// A machine's rank counts for perMachine downloads at a time: more of the same client
// rank as a new machine's would, when they came. No download waits longer than the
// gate's wait: past it, it sends without a place, so clients that hold places by reading
// slowly, or by downloading without end, delay others by that much at most.
type downloadGate struct {
	clock Clock
	wait  time.Duration

	mu      sync.Mutex
	free    int
	seq     uint64
	waiting waiters
	// machines is when each client first asked, while it has a download in flight or
	// waiting, and for forget after its last one ended.
	machines map[netip.Addr]*machine
	// sweepAt is the size of machines at which ended machines are swept out next.
	sweepAt int
}

// machine is one client address's standing at the gate.
type machine struct {
	first time.Time
	// active counts its downloads in the gate; ended is when the last one left.
	active int
	ended  time.Time
}

// perMachine is how many downloads of one machine at a time wait with its rank (iPXE
// downloads one file after the other).
const perMachine = 2

// forget is how long a machine keeps its place after its last download ended: long
// enough to ask for its next file (iPXE asks for the initrd right after the kernel).
const forget = time.Minute

// waiter is one download waiting for a place, ranked by first; ready is closed when it
// has one.
type waiter struct {
	first time.Time
	seq   uint64
	ready chan struct{}
	index int
}

// newDownloadGate lets n downloads send at once, each waiting at most wait.
func newDownloadGate(n int, wait time.Duration, c Clock) *downloadGate {
	return &downloadGate{clock: c, wait: wait, free: n, machines: map[netip.Addr]*machine{}, sweepAt: 64}
}

// enter waits for a place for a download to client, at most the gate's wait, and returns
// the function that ends the download. It returns false when ctx ended first.
func (g *downloadGate) enter(ctx context.Context, client netip.Addr) (leave func(), ok bool) {
	g.mu.Lock()
	now := g.clock.Now()
	m := g.machines[client]
	if m == nil || m.active == 0 && now.Sub(m.ended) > forget {
		m = &machine{first: now}
		g.machines[client] = m
		g.sweep(now)
	}
	rank := m.first
	if m.active >= perMachine {
		rank = now
	}
	m.active++
	done := func(held bool) func() {
		return sync.OnceFunc(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if m.active--; m.active == 0 {
				m.ended = g.clock.Now()
			}
			if held {
				g.handOn()
			}
		})
	}
	if g.free > 0 && len(g.waiting) == 0 {
		g.free--
		g.mu.Unlock()
		return done(true), true
	}
	g.seq++
	w := &waiter{first: rank, seq: g.seq, ready: make(chan struct{})}
	heap.Push(&g.waiting, w)
	g.mu.Unlock()

	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	select {
	case <-w.ready:
		return done(true), true
	case <-timer.C:
	case <-ctx.Done():
	}
	g.mu.Lock()
	held := w.index < 0 // handed a place while the timer or ctx fired
	if !held {
		heap.Remove(&g.waiting, w.index)
	}
	g.mu.Unlock()
	if ctx.Err() != nil {
		done(held)()
		return nil, false
	}
	return done(held), true
}

// handOn gives a place that was let go to the first waiter, else frees it. The caller
// holds g.mu.
func (g *downloadGate) handOn() {
	if len(g.waiting) == 0 {
		g.free++
		return
	}
	w := heap.Pop(&g.waiting).(*waiter)
	close(w.ready)
}

// sweep drops the machines that ended more than forget ago once machines doubled since
// the last sweep, so that the map holds about the machines of the last minute. The
// caller holds g.mu.
func (g *downloadGate) sweep(now time.Time) {
	if len(g.machines) < g.sweepAt {
		return
	}
	for a, m := range g.machines {
		if m.active == 0 && now.Sub(m.ended) > forget {
			delete(g.machines, a)
		}
	}
	g.sweepAt = max(64, 2*len(g.machines))
}

// waiters is a heap of waiting downloads, their machine's first request first, then
// the order they came in.
type waiters []*waiter

func (h waiters) Len() int { return len(h) }
func (h waiters) Less(i, j int) bool {
	if !h[i].first.Equal(h[j].first) {
		return h[i].first.Before(h[j].first)
	}
	return h[i].seq < h[j].seq
}
func (h waiters) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiters) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*h = old[:len(old)-1]
	return w
}
