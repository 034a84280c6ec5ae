// Package inuse tells whether a host already uses an IPv4 address: the authoritative
// DHCP server's check of an address before it offers it, since a host configured by
// hand inside the range would otherwise have its address handed to a booting machine.
// Echo sends ICMP echo requests and matches their replies; Checker runs the checks of
// many requests at once, one at a time for each address, and remembers an address
// found free for a while, so that a client's retransmissions do not check it again. A
// check whose echo was not sent (ErrNotSent) finds nothing and is not remembered, nor is
// one the socket's failure cut (ErrDown), which finds no host.
package inuse

import (
	"errors"
	"net/netip"
	"sync"
	"time"
)

// Clock tells the time: how long a free address is remembered follows it. A
// clock.Clock is one (clock.Fake in tests).
type Clock interface{ Now() time.Time }

// Checker runs the checks of an address with its ping function: true when a host
// answered at the address, an error when the check did not run (Echo.Ping).
type Checker struct {
	ping     func(netip.Addr) (bool, error)
	clock    Clock
	remember time.Duration

	mu sync.Mutex
	// running is the check of each address that runs now; free is until when each
	// address found free is taken as free without a check.
	running map[netip.Addr]*check
	free    map[netip.Addr]time.Time
	// sweepAt is the size of free at which the addresses whose time ended leave it.
	sweepAt int
}

// check is one running check of an address, and its result once done is closed.
type check struct {
	done  chan struct{}
	inUse bool
	err   error
}

// minSweep is the smallest size of Checker.free that is swept: below it, keeping the
// ended entries costs less than walking them.
const minSweep = 64

// NewChecker is a checker that asks ping whether a host answers at an address, and
// takes an address found free as free for remember after.
func NewChecker(ping func(netip.Addr) (bool, error), clock Clock, remember time.Duration) *Checker {
	return &Checker{ping: ping, clock: clock, remember: remember,
		running: map[netip.Addr]*check{}, free: map[netip.Addr]time.Time{}, sweepAt: minSweep}
}

// InUse reports whether a host answers at ip, and the ping's error when the check did
// not run: the address is then neither in use nor free. An address found free less
// than the checker's remember ago is not checked again; a check of an address whose
// check runs waits for that one and shares its result. Checks of different addresses
// run at once, each in its caller's goroutine. A check whose socket was down (ErrDown)
// reports no host and no error, as the DHCP server offers while the socket is down, and
// is not remembered: the check once the socket is back sends an echo.
func (c *Checker) InUse(ip netip.Addr) (bool, error) {
	c.mu.Lock()
	if until, ok := c.free[ip]; ok && c.clock.Now().Before(until) {
		c.mu.Unlock()
		return false, nil
	}
	if r, ok := c.running[ip]; ok {
		c.mu.Unlock()
		<-r.done
		return r.inUse, r.err
	}
	r := &check{done: make(chan struct{})}
	c.running[ip] = r
	c.mu.Unlock()

	r.inUse, r.err = c.ping(ip)
	down := errors.Is(r.err, ErrDown)
	if down {
		r.err = nil
	}

	c.mu.Lock()
	delete(c.running, ip)
	switch {
	case r.inUse || r.err != nil || down:
		delete(c.free, ip)
	default:
		c.free[ip] = c.clock.Now().Add(c.remember)
		c.sweep()
	}
	c.mu.Unlock()
	close(r.done)
	return r.inUse, r.err
}

// sweep drops the free addresses whose time ended once there are sweepAt of them, so
// that what the checker keeps is bounded by the addresses checked within remember. The
// caller holds c.mu.
func (c *Checker) sweep() {
	if len(c.free) < c.sweepAt {
		return
	}
	now := c.clock.Now()
	for ip, until := range c.free {
		if !now.Before(until) {
			delete(c.free, ip)
		}
	}
	c.sweepAt = max(minSweep, 2*len(c.free))
}
