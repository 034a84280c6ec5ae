package lease

import (
	"encoding/binary"
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
	// ErrNoRecord: a client asked again for an address it had (INIT-REBOOT), and the
	// pool has no record of it, neither lease nor offer; the DHCP server remains silent.
	ErrNoRecord = errors.New("lease: no record of this client")
	// ErrUnknownShare: the client is not known and the clients not known hold their
	// share of the range already.
	ErrUnknownShare = errors.New("lease: the clients not known hold their share of the range")
	// ErrAwayShare: the addresses held away, found in use or declined, take their share
	// of the range already; one more is not held away.
	ErrAwayShare = errors.New("lease: the addresses held away as in use take their share of the range")
)

// Policy is how the pool serves the clients the site knows before the others, as a DHCP
// server's pools of known clients do: a client no one can authenticate may send under
// any number of MACs, and must not take the addresses the known machines boot with.
type Policy struct {
	// Known reports whether the site knows mac (a boot entry names it, or the machine is
	// enrolled at the site). A known client gets an address whenever one is not held by
	// another known client: when none is free it takes the address of a client not
	// known, the one whose lease ends first. nil knows every client.
	Known func(mac string) bool
	// UnknownShare is the fraction of the range's addresses (more than 0, at most 1)
	// that clients not known may hold at once, leases and offers, at least one address;
	// 0 is 1, no bound.
	UnknownShare float64
	// UnknownTTL is the length of the leases of clients not known, at most the pool's
	// TTL; 0 is the pool's TTL.
	UnknownTTL time.Duration
	// AwayShare is the fraction of the range's addresses (more than 0, at most 1) that
	// may be held away at once, found in use by the DHCP server's check (InUse) or
	// declined by clients (Decline), at least one address; 0 is 1, no bound. A host that
	// answers at every address, or declines every address it is offered, would
	// otherwise have the whole range held away for a lease time.
	AwayShare float64
}

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
	known bool
}

// Pool hands out the addresses of a range to clients, one lease per MAC.
type Pool struct {
	store    *Store
	rng      Range
	exclude  map[netip.Addr]bool
	ttl      time.Duration
	offerTTL time.Duration
	clock    Clock
	known    func(mac string) bool
	// unknownTTL is the length of the leases of clients not known; unknownMax the
	// addresses they may hold at once.
	unknownTTL time.Duration
	unknownMax int
	// awayMax is the addresses that may be held away at once (Policy.AwayShare).
	awayMax int

	mu     sync.Mutex
	byIP   map[netip.Addr]Lease
	byMAC  map[string]netip.Addr
	offers map[netip.Addr]offer
	// offerOf is the address offered to each MAC: a client has one offer at most, and
	// offerOf[mac] is ip exactly when offers[ip] is mac's.
	offerOf map[string]netip.Addr
	// held is the addresses clients not known hold and when their holds end, kept
	// with every change of byIP and offers (track).
	held *held
	// away is the addresses held away (Declined) and when their holds end, kept with
	// every change of byIP (track).
	away *held
	next netip.Addr
}

// NewPool loads the leases of store in rng and hands out addresses of rng, never one of
// exclude (the server's own address), for ttl each, the clients policy knows first.
// Pools of ranges that do not overlap may share a store.
func NewPool(store *Store, rng Range, exclude []netip.Addr, ttl time.Duration, clock Clock, policy Policy) (*Pool, error) {
	if !rng.Start.Is4() || !rng.End.Is4() || rng.End.Less(rng.Start) {
		return nil, fmt.Errorf("lease: range %s-%s is not an IPv4 range", rng.Start, rng.End)
	}
	if policy.UnknownShare < 0 || policy.UnknownShare > 1 {
		return nil, fmt.Errorf("lease: unknown share %g is outside 0-1", policy.UnknownShare)
	}
	if policy.AwayShare < 0 || policy.AwayShare > 1 {
		return nil, fmt.Errorf("lease: held-away share %g is outside 0-1", policy.AwayShare)
	}
	p := &Pool{store: store, rng: rng, exclude: map[netip.Addr]bool{}, ttl: ttl, offerTTL: 30 * time.Second, clock: clock,
		known: policy.Known, unknownTTL: ttl,
		byIP: map[netip.Addr]Lease{}, byMAC: map[string]netip.Addr{}, offers: map[netip.Addr]offer{}, offerOf: map[string]netip.Addr{},
		held: newHeld(), away: newHeld(), next: rng.Start}
	if p.known == nil {
		p.known = func(string) bool { return true }
	}
	if policy.UnknownTTL > 0 {
		p.unknownTTL = min(policy.UnknownTTL, ttl)
	}
	size := int(binary.BigEndian.Uint32(rng.End.AsSlice())-binary.BigEndian.Uint32(rng.Start.AsSlice())) + 1
	for _, a := range exclude {
		if rng.Contains(a) && !p.exclude[a] {
			size--
		}
		p.exclude[a] = true
	}
	p.unknownMax, p.awayMax = share(policy.UnknownShare, size), share(policy.AwayShare, size)
	all, err := store.All()
	if err != nil {
		return nil, err
	}
	for _, l := range all {
		if !rng.Contains(l.IP) {
			continue
		}
		p.setLease(l)
		if l.MAC == Declined {
			continue
		}
		if cur, ok := p.byMAC[l.MAC]; !ok || p.byIP[cur].Expiry.Before(l.Expiry) {
			p.byMAC[l.MAC] = l.IP
		}
	}
	return p, nil
}

// share is the addresses that fraction of a range of size addresses comes to, at least
// one; fraction 0 is the whole range.
func share(fraction float64, size int) int {
	if fraction == 0 {
		return size
	}
	return max(1, int(fraction*float64(size)))
}

// TTL is the length of the leases the pool grants to known clients, or to the others.
func (p *Pool) TTL(known bool) time.Duration {
	if known {
		return p.ttl
	}
	return p.unknownTTL
}

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
// the one offered to it before, else the next never-leased address, else the one whose
// lease ended longest ago, else, for a known client, the address a client not known
// holds whose lease ends first (takeable). It returns the lease mac would have; an offer
// to mac of another address before ends. A client not known gets ErrUnknownShare when
// the others not known hold their share of the range.
func (p *Pool) Offer(mac string, requested netip.Addr) (Lease, error) {
	known := p.known(mac)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	if !known && p.unknownHeld(mac, now) >= p.unknownMax {
		return Lease{}, ErrUnknownShare
	}
	var pick netip.Addr
	if ip, ok := p.byMAC[mac]; ok && p.freeFor(ip, mac, now) {
		pick = ip
	} else if requested.IsValid() && p.freeFor(requested, mac, now) {
		pick = requested
	} else if ip, ok := p.offerOf[mac]; ok && p.freeFor(ip, mac, now) {
		pick = ip
	} else if pick = p.scan(mac, now); !pick.IsValid() && known {
		pick = p.takeFromUnknown(mac, now)
	}
	if !pick.IsValid() {
		return Lease{}, ErrExhausted
	}
	p.setOffer(pick, offer{mac: mac, until: now.Add(p.offerTTL), known: known})
	return Lease{MAC: mac, IP: pick, Expiry: now.Add(p.TTL(known)), Known: known}, nil
}

// unknownHeld counts the addresses that clients not known, other than mac, hold now by
// a lease or an offer: those p.held counts, less the ones mac alone holds, which are
// among its lease's (byMAC) and its offer's. It costs O(log n) for each hold that ended
// since the last count, and nothing for the others. The caller holds p.mu.
func (p *Pool) unknownHeld(mac string, now time.Time) int {
	p.held.expire(now)
	n := p.held.Len()
	leased, hasLease := p.byMAC[mac]
	if hasLease && p.heldBy(leased, mac, now) {
		n--
	}
	if offered, ok := p.offerOf[mac]; ok && (!hasLease || offered != leased) && p.heldBy(offered, mac, now) {
		n--
	}
	return n
}

// heldBy reports whether clients not known hold ip now, mac alone among them. The
// caller holds p.mu, and p.held has expired at now.
func (p *Pool) heldBy(ip netip.Addr, mac string, now time.Time) bool {
	if !p.held.has(ip) {
		return false
	}
	l, leased := p.byIP[ip]
	o, offered := p.offers[ip]
	other := leased && !l.Known && l.MAC != Declined && l.MAC != mac && now.Before(l.Expiry) ||
		offered && !o.known && o.mac != mac && now.Before(o.until)
	return !other
}

// unknownEnd is when the hold of ip by a client not known ends, by its lease or its
// offer, whichever ends last: the zero time when no such client has either. The caller
// holds p.mu.
func (p *Pool) unknownEnd(ip netip.Addr) time.Time {
	var end time.Time
	if l, ok := p.byIP[ip]; ok && !l.Known && l.MAC != Declined {
		end = l.Expiry
	}
	if o, ok := p.offers[ip]; ok && !o.known && o.until.After(end) {
		end = o.until
	}
	return end
}

// track files ip in p.held and p.away after its lease or offer changed. The caller
// holds p.mu.
func (p *Pool) track(ip netip.Addr) {
	p.held.set(ip, p.unknownEnd(ip))
	var away time.Time
	if l, ok := p.byIP[ip]; ok && l.MAC == Declined {
		away = l.Expiry
	}
	p.away.set(ip, away)
}

// AwayFull reports whether the addresses held away, found in use or declined, take
// their share of the range (Policy.AwayShare) now: one more would not be held away, so
// the DHCP server offers without its check until a hold ends.
func (p *Pool) AwayFull() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.awayFull(p.clock.Now())
}

// awayFull is AwayFull. The caller holds p.mu.
func (p *Pool) awayFull(now time.Time) bool {
	p.away.expire(now)
	return p.away.Len() >= p.awayMax
}

// setLease makes l the lease of its address. The caller holds p.mu.
func (p *Pool) setLease(l Lease) {
	// The address's earlier client, if another, keeps no entry in byMAC for it: byMAC
	// names only leases held in the file, at most one a client and one an address, so a
	// host sending DHCP under ever new MACs does not grow it past the range.
	if prev, ok := p.byIP[l.IP]; ok && prev.MAC != l.MAC && p.byMAC[prev.MAC] == l.IP {
		delete(p.byMAC, prev.MAC)
	}
	p.byIP[l.IP] = l
	p.track(l.IP)
}

// setOffer makes o the offer of ip, in place of any other offer of ip and of o.mac's
// offer of another address. The caller holds p.mu.
func (p *Pool) setOffer(ip netip.Addr, o offer) {
	if old, ok := p.offerOf[o.mac]; ok && old != ip {
		p.dropOffer(old)
	}
	if prev, ok := p.offers[ip]; ok && prev.mac != o.mac {
		delete(p.offerOf, prev.mac)
	}
	p.offers[ip] = o
	p.offerOf[o.mac] = ip
	p.track(ip)
}

// dropOffer ends the offer of ip, if there is one. The caller holds p.mu.
func (p *Pool) dropOffer(ip netip.Addr) {
	o, ok := p.offers[ip]
	if !ok {
		return
	}
	delete(p.offers, ip)
	if p.offerOf[o.mac] == ip {
		delete(p.offerOf, o.mac)
	}
	p.track(ip)
}

// takeable reports whether the known client mac may take ip, which no known client
// holds, from the client not known that may hold it, and when that client's lease ends
// (zero for an offer only). The caller holds p.mu.
func (p *Pool) takeable(ip netip.Addr, mac string, now time.Time) (time.Time, bool) {
	if !p.rng.Contains(ip) || p.exclude[ip] {
		return time.Time{}, false
	}
	if o, ok := p.offers[ip]; ok && o.mac != mac && o.known && now.Before(o.until) {
		return time.Time{}, false
	}
	l, ok := p.byIP[ip]
	if !ok || l.MAC == mac || !now.Before(l.Expiry) {
		return time.Time{}, true
	}
	if l.Known || l.MAC == Declined || p.known(l.MAC) {
		return time.Time{}, false
	}
	return l.Expiry, true
}

// takeFromUnknown is the address held by a client not known that the known client mac
// takes when no address is free: one only offered first, then the lease that ends first
// (renewed longest ago); invalid when there is none. The caller holds p.mu.
func (p *Pool) takeFromUnknown(mac string, now time.Time) netip.Addr {
	var pick netip.Addr
	var pickEnd time.Time
	p.held.expire(now)
	for _, h := range p.held.addrs {
		ip := h.ip
		end, ok := p.takeable(ip, mac, now)
		if ok && (!pick.IsValid() || end.Before(pickEnd) || end.Equal(pickEnd) && ip.Less(pick)) {
			pick, pickEnd = ip, end
		}
	}
	return pick
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

// Claim is how a DHCPREQUEST claims its address, by the client's state (RFC 2131
// section 4.3.2); it decides whether the pool must have a record of the address for the
// client: its lease's address (current or ended, the last one it was leased) or the
// address last offered to it.
type Claim int

const (
	// Renewing: the client has the address configured (RENEWING, REBINDING: ciaddr)
	// and is acknowledged whenever the address is free for it, record or not, so that
	// clients keep their addresses after the lease file is lost.
	Renewing Claim = iota
	// Selecting: the client takes this server's offer (SELECTING: option 54 names it);
	// an address that is not the record's fails with ErrNotYours.
	Selecting
	// Rebooting: the client asks again for the address it had (INIT-REBOOT: option 50,
	// no option 54); it fails with ErrNoRecord when the pool has no record for the
	// client, and with ErrNotYours when its record is another address.
	Rebooting
)

// Ack binds ip to mac for the TTL of its class and returns once the lease is durable. It
// fails as claim says when the pool has no record of ip for mac, with ErrNotYours when
// the address may not be given to mac, and with ErrUnknownShare when mac is not known
// and the others not known hold their share. A known client offered the address of a
// client not known takes it: the new lease replaces the other's in the lease file, in
// the same write.
func (p *Pool) Ack(mac string, ip netip.Addr, claim Claim) (Lease, error) {
	known := p.known(mac)
	p.mu.Lock()
	if err := p.recorded(mac, ip, claim); err != nil {
		p.mu.Unlock()
		return Lease{}, err
	}
	now := p.clock.Now()
	free := p.freeFor(ip, mac, now)
	if o, ok := p.offers[ip]; !free && known && ok && o.mac == mac && now.Before(o.until) {
		_, free = p.takeable(ip, mac, now)
	}
	if !free {
		p.mu.Unlock()
		return Lease{}, ErrNotYours
	}
	if !known && p.unknownHeld(mac, now) >= p.unknownMax {
		p.mu.Unlock()
		return Lease{}, ErrUnknownShare
	}
	l := Lease{MAC: mac, IP: ip, Expiry: now.Add(p.TTL(known)), Known: known}
	writes := []Lease{l}
	// A client that moves to another address ends its lease of the old one.
	if old, ok := p.byMAC[mac]; ok && old != ip && p.byIP[old].MAC == mac {
		writes = append(writes, Lease{MAC: mac, IP: old, Expiry: now})
	}
	saved := p.save(writes)
	for _, w := range writes {
		p.setLease(w)
	}
	p.byMAC[mac] = ip
	// The client took ip: the offer of ip ends, and mac's of another address.
	p.dropOffer(ip)
	if other, ok := p.offerOf[mac]; ok {
		p.dropOffer(other)
	}
	p.mu.Unlock()

	if err := p.store.Put(writes...); err != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		saved.restore(p, writes, mac)
		return Lease{}, err
	}
	return l, nil
}

// recorded is nil when claim may take ip for mac: always when Renewing, else when ip
// is mac's record, the address of its lease (byMAC) or of its offer (offerOf). The
// caller holds p.mu.
func (p *Pool) recorded(mac string, ip netip.Addr, claim Claim) error {
	if claim == Renewing {
		return nil
	}
	leased, hasLease := p.byMAC[mac]
	offered, hasOffer := p.offerOf[mac]
	switch {
	case hasLease && leased == ip || hasOffer && offered == ip:
		return nil
	case claim == Rebooting && !hasLease && !hasOffer:
		return ErrNoRecord
	}
	return ErrNotYours
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
			p.setLease(l)
			if _, has := p.byMAC[l.MAC]; !has && l.MAC != Declined && l.MAC != mac {
				p.byMAC[l.MAC] = l.IP // the entry setLease took from it when w was set
			}
		} else {
			delete(p.byIP, w.IP)
			p.track(w.IP)
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
	p.mu.Lock()
	if !p.holds(mac, ip) {
		p.mu.Unlock()
		return ErrNotYours
	}
	return p.endNow(mac, ip)
}

// acked is when l was last acknowledged: its expiry less the TTL of its class.
func (p *Pool) acked(l Lease) time.Time {
	return l.Expiry.Add(-p.TTL(l.Known))
}

// holds reports whether the lease of ip is mac's. The caller holds p.mu.
func (p *Pool) holds(mac string, ip netip.Addr) bool {
	l, ok := p.byIP[ip]
	return ok && l.MAC == mac
}

// endNow ends mac's lease of ip now, keeping it in the file expired. The caller holds
// p.mu, which endNow releases before it writes.
func (p *Pool) endNow(mac string, ip netip.Addr) error {
	n := Lease{MAC: mac, IP: ip, Expiry: p.clock.Now()}
	p.setLease(n)
	p.mu.Unlock()
	return p.store.Put(n)
}

// declineWithin is how long after its DHCPACK a lease may be declined. A client
// declines an address it was just given, when its check before it uses it (ARP, RFC 2131
// section 4.4.1; RFC 5227's probes take some 9 s at most) finds another host there; a
// client that uses its address already never declines it. A DHCPDECLINE of a lease
// acknowledged longer ago is another host's, sent in the machine's name: it had the
// machine's address held away, and the machine lose it at its next renewal.
const declineWithin = time.Minute

// Decline marks ip unusable for one TTL (DHCPDECLINE: the client found it in use). It
// fails with ErrNotYours unless ip is mac's lease, acknowledged (or renewed) within
// declineWithin. When the addresses held away take their share of the range, mac's
// lease of ip ends at once instead, as a release, and Decline fails with ErrAwayShare:
// the address goes to new clients after every never-used one.
func (p *Pool) Decline(mac string, ip netip.Addr) error {
	p.mu.Lock()
	now := p.clock.Now()
	if !p.holds(mac, ip) || now.Sub(p.acked(p.byIP[ip])) > declineWithin {
		p.mu.Unlock()
		return ErrNotYours
	}
	if p.awayFull(now) {
		if err := p.endNow(mac, ip); err != nil {
			return err
		}
		return ErrAwayShare
	}
	return p.holdAway(mac, ip)
}

// Unleased reports whether ip, offered to mac, is an address no lease of the file
// accounts for now: neither mac's own (its lease, current or ended) nor one another
// client holds (a known client's take-over, whose former holder is not told). A host
// nobody leased it to may still use such an address, so the DHCP server checks it
// before it offers it.
func (p *Pool) Unleased(mac string, ip netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.byIP[ip]
	if ok && l.MAC == mac && p.byMAC[mac] == ip {
		return false
	}
	return !ok || !p.clock.Now().Before(l.Expiry)
}

// InUse holds ip away as a declined address, for one TTL: a host answered at it before
// it went to mac, whose offer of it ends. It fails with ErrNotYours when ip is not
// offered to mac (another request of mac's found it in use first), and with
// ErrAwayShare when the addresses held away take their share of the range: the offer
// ends, and the address is not held.
func (p *Pool) InUse(mac string, ip netip.Addr) error {
	p.mu.Lock()
	if o, ok := p.offers[ip]; !ok || o.mac != mac {
		p.mu.Unlock()
		return ErrNotYours
	}
	p.dropOffer(ip)
	if p.awayFull(p.clock.Now()) {
		p.mu.Unlock()
		return ErrAwayShare
	}
	return p.holdAway(mac, ip)
}

// holdAway gives ip to Declined for one TTL, which mac, the client that found it in use,
// no longer names. The caller holds p.mu, which holdAway releases before it writes.
func (p *Pool) holdAway(mac string, ip netip.Addr) error {
	n := Lease{MAC: Declined, IP: ip, Expiry: p.clock.Now().Add(p.ttl)}
	if p.byMAC[mac] == ip {
		delete(p.byMAC, mac)
	}
	p.setLease(n)
	p.mu.Unlock()
	return p.store.Put(n)
}
