package lease

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// Clock tells the time: a clock.Clock (clock.Fake in tests, which move it by hand).
type Clock interface{ Now() time.Time }

// Errors of the pool's answers.
var (
	// ErrExhausted: no address of the range is free.
	ErrExhausted = errors.New("lease: no free address in the range")
	// ErrNotYours: the address is outside the range or bound to another client; the
	// DHCP server answers DHCPNAK.
	ErrNotYours = errors.New("lease: address not available to this client")
)

// Range is an inclusive range of IPv4 addresses.
type Range struct{ Start, End netip.Addr }

// Contains reports whether a lies in the range.
func (r Range) Contains(a netip.Addr) bool {
	return a.Is4() && r.Start.Compare(a) <= 0 && a.Compare(r.End) <= 0
}

// offer is an address promised to a client for a short while, kept in memory only: an
// offer lost in a restart costs the client one more DHCPDISCOVER.
type offer struct {
	mac   string
	until time.Time
}

// Pool hands out the addresses of a range to clients, one lease per MAC.
type Pool struct {
	store    *Store
	rng      Range
	exclude  map[netip.Addr]bool
	ttl      time.Duration
	offerTTL time.Duration
	clock    Clock

	mu     sync.Mutex
	byIP   map[netip.Addr]Lease
	byMAC  map[string]netip.Addr
	offers map[netip.Addr]offer
	next   netip.Addr
}

// NewPool loads the leases of store in rng and hands out addresses of rng, never one of
// exclude (the server's own address), for ttl each. Pools of ranges that do not overlap
// may share a store.
func NewPool(store *Store, rng Range, exclude []netip.Addr, ttl time.Duration, clock Clock) (*Pool, error) {
	if !rng.Start.Is4() || !rng.End.Is4() || rng.End.Less(rng.Start) {
		return nil, fmt.Errorf("lease: range %s-%s is not an IPv4 range", rng.Start, rng.End)
	}
	p := &Pool{store: store, rng: rng, exclude: map[netip.Addr]bool{}, ttl: ttl, offerTTL: 30 * time.Second, clock: clock,
		byIP: map[netip.Addr]Lease{}, byMAC: map[string]netip.Addr{}, offers: map[netip.Addr]offer{}, next: rng.Start}
	for _, a := range exclude {
		p.exclude[a] = true
	}
	all, err := store.All()
	if err != nil {
		return nil, err
	}
	for _, l := range all {
		if !rng.Contains(l.IP) {
			continue
		}
		p.byIP[l.IP] = l
		if l.MAC == Declined {
			continue
		}
		if cur, ok := p.byMAC[l.MAC]; !ok || p.byIP[cur].Expiry.Before(l.Expiry) {
			p.byMAC[l.MAC] = l.IP
		}
	}
	return p, nil
}

// TTL is the length of the leases the pool grants.
func (p *Pool) TTL() time.Duration { return p.ttl }

// Holds reports whether mac holds an unexpired lease of ip now.
func (p *Pool) Holds(mac string, ip netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.byIP[ip]
	return ok && l.MAC == mac && p.clock.Now().Before(l.Expiry)
}

// freeFor reports whether ip may be given to mac now. The caller holds p.mu.
func (p *Pool) freeFor(ip netip.Addr, mac string, now time.Time) bool {
	if !p.rng.Contains(ip) || p.exclude[ip] {
		return false
	}
	if l, ok := p.byIP[ip]; ok && l.MAC != mac && now.Before(l.Expiry) {
		return false
	}
	if o, ok := p.offers[ip]; ok && o.mac != mac && now.Before(o.until) {
		return false
	}
	return true
}

// Offer picks an address for mac: its current lease's, else the one it asked for, else
// the next never-leased address, else the one whose lease ended longest ago.
func (p *Pool) Offer(mac string, requested netip.Addr) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	pick := netip.Addr{}
	if ip, ok := p.byMAC[mac]; ok && p.freeFor(ip, mac, now) {
		pick = ip
	} else if requested.IsValid() && p.freeFor(requested, mac, now) {
		pick = requested
	} else {
		pick = p.scan(mac, now)
	}
	if !pick.IsValid() {
		return pick, ErrExhausted
	}
	p.offers[pick] = offer{mac: mac, until: now.Add(p.offerTTL)}
	return pick, nil
}

// scan walks the range once from the cursor. The caller holds p.mu.
func (p *Pool) scan(mac string, now time.Time) netip.Addr {
	var oldest netip.Addr
	var oldestEnd time.Time
	ip := p.next
	for {
		if p.freeFor(ip, mac, now) {
			l, leased := p.byIP[ip]
			if !leased {
				p.next = p.step(ip)
				return ip
			}
			if !oldest.IsValid() || l.Expiry.Before(oldestEnd) {
				oldest, oldestEnd = ip, l.Expiry
			}
		}
		ip = p.step(ip)
		if ip == p.next {
			return oldest
		}
	}
}

// step is the address after ip, wrapping at the range's end.
func (p *Pool) step(ip netip.Addr) netip.Addr {
	if ip == p.rng.End {
		return p.rng.Start
	}
	return ip.Next()
}

// Ack binds ip to mac for the pool's TTL and returns once the lease is durable. It fails
// with ErrNotYours when the address may not be given to mac.
func (p *Pool) Ack(mac string, ip netip.Addr) (Lease, error) {
	p.mu.Lock()
	now := p.clock.Now()
	if !p.freeFor(ip, mac, now) {
		p.mu.Unlock()
		return Lease{}, ErrNotYours
	}
	l := Lease{MAC: mac, IP: ip, Expiry: now.Add(p.ttl)}
	writes := []Lease{l}
	// A client that moves to another address ends its lease of the old one.
	if old, ok := p.byMAC[mac]; ok && old != ip && p.byIP[old].MAC == mac {
		writes = append(writes, Lease{MAC: mac, IP: old, Expiry: now})
	}
	saved := p.save(writes)
	for _, w := range writes {
		p.byIP[w.IP] = w
	}
	p.byMAC[mac] = ip
	delete(p.offers, ip)
	p.mu.Unlock()

	if err := p.store.Put(writes...); err != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		saved.restore(p, writes, mac)
		return Lease{}, err
	}
	return l, nil
}

// saved is the memory a failed write puts back.
type saved struct {
	byIP   map[netip.Addr]Lease
	mac    netip.Addr
	hadMAC bool
}

// save remembers what writes will change. The caller holds p.mu.
func (p *Pool) save(writes []Lease) saved {
	s := saved{byIP: map[netip.Addr]Lease{}}
	for _, w := range writes {
		if l, ok := p.byIP[w.IP]; ok {
			s.byIP[w.IP] = l
		}
	}
	s.mac, s.hadMAC = p.byMAC[writes[0].MAC]
	return s
}

// restore puts back what save remembered of writes. The caller holds p.mu.
func (s saved) restore(p *Pool, writes []Lease, mac string) {
	for _, w := range writes {
		if l, ok := s.byIP[w.IP]; ok {
			p.byIP[w.IP] = l
		} else {
			delete(p.byIP, w.IP)
		}
	}
	if s.hadMAC {
		p.byMAC[mac] = s.mac
	} else {
		delete(p.byMAC, mac)
	}
}

// Release ends mac's lease of ip at once (DHCPRELEASE). The address is kept in the file,
// expired, so that it goes to new clients only after every never-used one.
func (p *Pool) Release(mac string, ip netip.Addr) error {
	return p.end(mac, ip, mac)
}

// Decline marks ip unusable for one TTL (DHCPDECLINE: the client found it in use).
func (p *Pool) Decline(mac string, ip netip.Addr) error {
	return p.end(mac, ip, Declined)
}

func (p *Pool) end(mac string, ip netip.Addr, owner string) error {
	p.mu.Lock()
	l, ok := p.byIP[ip]
	if !ok || l.MAC != mac {
		p.mu.Unlock()
		return ErrNotYours
	}
	now := p.clock.Now()
	n := Lease{MAC: owner, IP: ip, Expiry: now}
	if owner == Declined {
		n.Expiry = now.Add(p.ttl)
		delete(p.byMAC, mac)
	}
	p.byIP[ip] = n
	p.mu.Unlock()
	return p.store.Put(n)
}
