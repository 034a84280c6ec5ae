package boot

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
)

// enterAsync enters g for client in a goroutine; the channel gets the leave function
// once it was let through (nil when ctx ended first).
func enterAsync(ctx context.Context, g *downloadGate, client netip.Addr) <-chan func() {
	ch := make(chan func(), 1)
	go func() {
		leave, ok := g.enter(ctx, client)
		if !ok {
			leave = nil
		}
		ch <- leave
	}()
	return ch
}

// queueLater moves fake on a second, has client enter g, and waits until its download
// waits in the queue.
func queueLater(t *testing.T, g *downloadGate, fake *clock.Fake, client netip.Addr) <-chan func() {
	t.Helper()
	g.mu.Lock()
	n := len(g.waiting)
	g.mu.Unlock()
	fake.Advance(time.Second)
	ch := enterAsync(context.Background(), g, client)
	waitQueued(t, g, n+1)
	return ch
}

// waitQueued waits until n downloads wait at g.
func waitQueued(t *testing.T, g *downloadGate, n int) {
	t.Helper()
	for {
		g.mu.Lock()
		k := len(g.waiting)
		g.mu.Unlock()
		if k == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// wantAllFree fails the test unless all n places of g are free, as they are once every
// download ended.
func wantAllFree(t *testing.T, g *downloadGate, n int) {
	t.Helper()
	if free := freePlaces(g); free != n {
		t.Errorf("%d places free after every download ended, want %d", free, n)
	}
}

// freePlaces is how many places g has free.
func freePlaces(g *downloadGate) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.free
}

// TestDownloadGateOrdersByMachine checks that a freed place goes to the waiting download
// of the machine that asked first, even when another machine's download waited longer:
// machine A's second file goes before machine B's first.
func TestDownloadGateOrdersByMachine(t *testing.T) {
	fake := clock.NewFake(time.Unix(1e9, 0))
	g := newDownloadGate(1, time.Hour, fake)
	a, b := netip.MustParseAddr("10.99.1.1"), netip.MustParseAddr("10.99.1.2")
	leaveA, ok := g.enter(context.Background(), a) // A's kernel
	if !ok {
		t.Fatal("the first download waited")
	}
	bKernel := queueLater(t, g, fake, b)
	aInitrd := queueLater(t, g, fake, a)

	leaveA()
	var next func()
	select {
	case next = <-aInitrd:
		if next == nil {
			t.Fatal("A's second download was refused")
		}
	case leave := <-bKernel:
		leave()
		t.Fatal("B's first download went before A's second, whose machine asked first")
	}
	select {
	case <-bKernel:
		t.Fatal("B's download went while A's second held the only place")
	default:
	}
	next()
	if leave := <-bKernel; leave == nil {
		t.Fatal("B's download was refused")
	} else {
		leave()
	}
	wantAllFree(t, g, 1)
}

// TestDownloadGateRanksAMachineForTwo checks that a machine's rank counts for two
// downloads at a time: a third of the same client waits as a newcomer would, behind a
// machine that came before it, so that one client can not take every place by asking
// for many files at once.
func TestDownloadGateRanksAMachineForTwo(t *testing.T) {
	fake := clock.NewFake(time.Unix(1e9, 0))
	g := newDownloadGate(1, time.Hour, fake)
	a, b := netip.MustParseAddr("10.99.1.1"), netip.MustParseAddr("10.99.1.2")
	leaveA, _ := g.enter(context.Background(), a)
	second := queueLater(t, g, fake, a)
	bFirst := queueLater(t, g, fake, b)
	third := queueLater(t, g, fake, a)

	leaveA()
	(<-second)()
	select {
	case leave := <-bFirst:
		leave()
	case leave := <-third:
		leave()
		t.Fatal("the client's third download at once went before another machine's first")
	}
	(<-third)()
	wantAllFree(t, g, 1)
}

// TestDownloadGateWaitIsBounded checks that a download whose place does not come within
// the gate's wait sends anyway, and that its end frees no place it never held.
func TestDownloadGateWaitIsBounded(t *testing.T) {
	g := newDownloadGate(1, 10*time.Millisecond, clock.Real{})
	hold, _ := g.enter(context.Background(), netip.MustParseAddr("10.99.1.1"))
	leave := <-enterAsync(context.Background(), g, netip.MustParseAddr("10.99.1.2"))
	if leave == nil {
		t.Fatal("a download that waited its time was refused")
	}
	leave()
	if n := freePlaces(g); n != 0 {
		t.Errorf("%d places free while one is held, want 0", n)
	}
	hold()
	hold() // a second call changes nothing
	wantAllFree(t, g, 1)
}

// TestDownloadGateClientGone checks that a download whose client went away while it
// waited leaves the queue and holds no place.
func TestDownloadGateClientGone(t *testing.T) {
	g := newDownloadGate(1, time.Hour, clock.Real{})
	hold, _ := g.enter(context.Background(), netip.MustParseAddr("10.99.1.1"))
	ctx, cancel := context.WithCancel(context.Background())
	gone := enterAsync(ctx, g, netip.MustParseAddr("10.99.1.2"))
	waitQueued(t, g, 1)
	cancel()
	if leave := <-gone; leave != nil {
		t.Fatal("a download whose client went away was let through")
	}
	waitQueued(t, g, 0)
	hold()
	wantAllFree(t, g, 1)
}

// TestDownloadGateForgets checks that a machine keeps its place for forget after its last
// download, and that one ended longer ago is swept out as others come.
func TestDownloadGateForgets(t *testing.T) {
	fake := clock.NewFake(time.Unix(1e9, 0))
	g := newDownloadGate(1, time.Hour, fake)
	first := netip.MustParseAddr("10.99.0.1")
	leave, _ := g.enter(context.Background(), first)
	leave()
	was := g.machines[first].first
	fake.Advance(forget / 2)
	leave, _ = g.enter(context.Background(), first)
	leave()
	if got := g.machines[first].first; !got.Equal(was) {
		t.Errorf("a machine back within forget ranks from %v, want its first request's %v", got, was)
	}
	fake.Advance(2 * forget)
	for i := range 1000 {
		leave, _ := g.enter(context.Background(), netip.AddrFrom4([4]byte{10, 99, byte(1 + i>>8), byte(i)}))
		leave()
	}
	if _, ok := g.machines[first]; ok {
		t.Error("a machine ended longer than forget ago is still kept")
	}
}
