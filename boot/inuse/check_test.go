package inuse

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/better-compute/better-compute/clock"
)

// pings is a ping function whose echoes are answered (or not) when a test says so: each
// ping waits for its address's answer, and the pings asked are counted.
type pings struct {
	mu     sync.Mutex
	asked  map[netip.Addr]int
	answer map[netip.Addr]chan bool
}

func newPings() *pings {
	return &pings{asked: map[netip.Addr]int{}, answer: map[netip.Addr]chan bool{}}
}

// ch is ip's answer channel.
func (p *pings) ch(ip netip.Addr) chan bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.answer[ip] == nil {
		p.answer[ip] = make(chan bool)
	}
	return p.answer[ip]
}

func (p *pings) ping(ip netip.Addr) (bool, error) {
	p.mu.Lock()
	p.asked[ip]++
	p.mu.Unlock()
	return <-p.ch(ip), nil
}

// inUse is c.InUse for a ping that never fails.
func inUse(t *testing.T, c *Checker, ip netip.Addr) bool {
	used, err := c.InUse(ip)
	if err != nil {
		t.Errorf("check of %s: %v", ip, err)
	}
	return used
}

func (p *pings) count(ip netip.Addr) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked[ip]
}

var a, b = netip.MustParseAddr("10.9.0.100"), netip.MustParseAddr("10.9.0.101")

// TestOneCheckPerAddressAtATime: a check of an address whose check runs (a client's
// retransmitted DISCOVER, offered the same address) sends no echo of its own and shares
// the running check's result, an address in use included.
func TestOneCheckPerAddressAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPings()
		c := NewChecker(p.ping, clock.NewFake(time.Unix(1e9, 0)), 30*time.Second)
		results := make(chan bool, 2)
		go func() { results <- inUse(t, c, a) }()
		synctest.Wait() // the first check's echo is out
		go func() { results <- inUse(t, c, a) }()
		synctest.Wait() // the second waits
		if n := p.count(a); n != 1 {
			t.Fatalf("%d echoes to %s while one check runs, want 1", n, a)
		}
		p.ch(a) <- true
		if r1, r2 := <-results, <-results; !r1 || !r2 {
			t.Errorf("results %v and %v, want both in use", r1, r2)
		}
		if n := p.count(a); n != 1 {
			t.Errorf("%d echoes, want 1", n)
		}
	})
}

// TestChecksOfDifferentAddressesRunAtOnce: the check of one address does not wait for
// another's: both echoes are out before either is answered.
func TestChecksOfDifferentAddressesRunAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPings()
		c := NewChecker(p.ping, clock.NewFake(time.Unix(1e9, 0)), 30*time.Second)
		results := make(chan bool, 2)
		go func() { results <- inUse(t, c, a) }()
		go func() { results <- inUse(t, c, b) }()
		synctest.Wait()
		if p.count(a) != 1 || p.count(b) != 1 {
			t.Fatalf("echoes out: %s %d, %s %d; want one each at once", a, p.count(a), b, p.count(b))
		}
		p.ch(a) <- false
		p.ch(b) <- true
		<-results
		<-results
	})
}

// TestFreeAddressIsRemembered: an address found free is taken as free without an echo
// until the checker's time for it ends; one found in use is checked again each time.
func TestFreeAddressIsRemembered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPings()
		clk := clock.NewFake(time.Unix(1e9, 0))
		c := NewChecker(p.ping, clk, 30*time.Second)
		check := func(ip netip.Addr, answer bool) bool {
			done := make(chan bool)
			go func() { done <- inUse(t, c, ip) }()
			synctest.Wait()
			select {
			case r := <-done: // no echo: remembered
				return r
			case p.ch(ip) <- answer:
				return <-done
			}
		}
		if check(a, false) {
			t.Fatal("in use, want free")
		}
		clk.Advance(29 * time.Second)
		if check(a, true) || p.count(a) != 1 {
			t.Errorf("29 s later: %d echoes, want the free result remembered without another", p.count(a))
		}
		clk.Advance(time.Second)
		if !check(a, true) || p.count(a) != 2 {
			t.Errorf("30 s later: %d echoes, want a second, which finds it in use", p.count(a))
		}
		if !check(a, true) || p.count(a) != 3 {
			t.Errorf("in use: %d echoes, want it checked again", p.count(a))
		}
	})
}

// TestRememberedAddressesAreBounded: the free addresses whose time ended leave the
// checker's memory, so that it holds no more than the addresses checked lately.
func TestRememberedAddressesAreBounded(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	c := NewChecker(func(netip.Addr) (bool, error) { return false, nil }, clk, 30*time.Second)
	ip := netip.MustParseAddr("10.9.0.0")
	for range 10 {
		for range 1000 {
			c.InUse(ip)
			ip = ip.Next()
		}
		clk.Advance(time.Minute)
	}
	if n := len(c.free); n > 2*1000+minSweep {
		t.Errorf("%d free addresses remembered after ten rounds of 1,000, each past its time", n)
	}
}

// TestCheckNotSentIsNotRemembered: a check whose echo was not sent tells its error to
// the check that waited for it too, and the address is not taken as free: the next
// check sends an echo, and finds the host that answers there.
func TestCheckNotSentIsNotRemembered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var echoes int
		refuse := make(chan struct{})
		c := NewChecker(func(netip.Addr) (bool, error) {
			echoes++
			if echoes == 1 {
				<-refuse
				return false, ErrNotSent
			}
			return true, nil
		}, clock.NewFake(time.Unix(1e9, 0)), 30*time.Second)
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				used, err := c.InUse(a)
				if used {
					t.Error("in use after an echo not sent")
				}
				errs <- err
			}()
			synctest.Wait()
		}
		close(refuse)
		for range 2 {
			if err := <-errs; !errors.Is(err, ErrNotSent) {
				t.Errorf("check of an echo not sent: %v, want ErrNotSent", err)
			}
		}
		if used, err := c.InUse(a); !used || err != nil || echoes != 2 {
			t.Errorf("the next check: in use %v, %v after %d echoes; want in use after a second echo", used, err, echoes)
		}
	})
}
