package lease

import (
	"errors"
	"maps"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
)

// TestUnknownCountMatchesAWalk drives pools through random sequences of offers,
// acknowledgements (known clients taking the addresses of others among them), releases,
// declines, the clock moving on, clients becoming known or not, restarts from the lease
// file and acknowledgements whose write fails, and after every step checks the running
// count of the addresses clients not known hold against a walk over every lease and
// offer, for every client, and the addresses it holds against the walk's.
func TestUnknownCountMatchesAWalk(t *testing.T) {
	eight := Range{Start: ip("10.9.2.1"), End: ip("10.9.2.8")}
	exclude := []netip.Addr{ip("10.9.2.4")}
	macs := []string{"k1", "k2", "k3", "u1", "u2", "u3", "u4", "u5"}
	addrs := []netip.Addr{ip("10.9.3.1")} // one outside the range
	for a := eight.Start; a.Compare(eight.End) <= 0; a = a.Next() {
		addrs = append(addrs, a)
	}
	steps := map[string]int{}
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 0x1ea5e))
		clk := clock.NewFake(time.Unix(1e9, 0))
		path := filepath.Join(t.TempDir(), "leases.db")
		k := knownSet{"k1": true, "k2": true, "k3": true}
		share := []float64{0.5, 1}[seed%2] // with no bound the others fill the range
		var s *Store
		var p *Pool
		restart := func() {
			if s != nil {
				s.Close()
			}
			var err error
			if s, err = Open(path); err != nil {
				t.Fatal(err)
			}
			if p, err = NewPool(s, eight, exclude, time.Hour, clk, Policy{Known: k.known, UnknownShare: share, UnknownTTL: 10 * time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		restart()
		for i := range 300 {
			mac := macs[r.IntN(len(macs))]
			addr := addrs[r.IntN(len(addrs))]
			if r.IntN(2) == 0 {
				p.mu.Lock()
				if a, ok := p.offerOf[mac]; ok {
					addr = a
				} else if a, ok := p.byMAC[mac]; ok {
					addr = a
				}
				p.mu.Unlock()
			}
			var step string
			switch n := r.IntN(100); {
			case n < 30:
				step = "offer"
				req := netip.Addr{}
				if r.IntN(2) == 0 {
					req = addr
				}
				if _, err := p.Offer(mac, req); errors.Is(err, ErrUnknownShare) {
					step = "offer refused for the share"
				}
			case n < 60:
				step = "ack"
				p.mu.Lock()
				taking := k[mac] && heldNow(p, addr, clk.Now()) && p.byIP[addr].MAC != mac
				p.mu.Unlock()
				_, err := p.Ack(mac, addr, Renewing)
				switch {
				case err == nil && taking:
					step = "ack taking the address of a client not known"
				case errors.Is(err, ErrUnknownShare):
					step = "ack refused for the share"
				}
			case n < 68:
				step = "release"
				p.Release(mac, addr)
			case n < 74:
				step = "decline"
				p.Decline(mac, addr)
			case n < 84:
				step = "clock"
				clk.Advance([]time.Duration{time.Second, 20 * time.Second, 31 * time.Second, 5 * time.Minute, 11 * time.Minute, 61 * time.Minute}[r.IntN(6)])
			case n < 86:
				step = "known"
				k[mac] = !k[mac]
			case n < 93:
				step = "restart"
				restart()
			default:
				step = "ack with a failed write"
				s.Close()
				if _, err := p.Ack(mac, addr, Renewing); err == nil {
					t.Fatalf("seed %d step %d: ack on a closed store succeeded", seed, i)
				}
				checkCount(t, p, macs, clk.Now(), seed, i, step)
				restart()
			}
			steps[step]++
			checkCount(t, p, macs, clk.Now(), seed, i, step)
		}
		s.Close()
	}
	for _, want := range []string{"offer refused for the share", "ack refused for the share", "ack taking the address of a client not known", "release", "decline", "restart", "ack with a failed write"} {
		if steps[want] == 0 {
			t.Errorf("no step %q in any sequence: %v", want, steps)
		}
	}
	t.Logf("steps: %v", steps)
}

// checkCount compares p's running count with walkUnknown for each of macs, p.held with
// the addresses the walk finds held, and offerOf with offers.
func checkCount(t *testing.T, p *Pool, macs []string, now time.Time, seed uint64, i int, step string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, mac := range macs {
		if got, want := p.unknownHeld(mac, now), walkUnknown(p, mac, now); got != want {
			t.Fatalf("seed %d step %d (%s): %s counts %d addresses held by the others not known, a walk %d", seed, i, step, mac, got, want)
		}
	}
	var held, walked []netip.Addr
	for _, h := range p.held.addrs {
		held = append(held, h.ip)
	}
	for ip := range p.byIP {
		if heldNow(p, ip, now) {
			walked = append(walked, ip)
		}
	}
	for ip := range p.offers {
		if _, leased := p.byIP[ip]; !leased && heldNow(p, ip, now) {
			walked = append(walked, ip)
		}
	}
	slices.SortFunc(held, netip.Addr.Compare)
	slices.SortFunc(walked, netip.Addr.Compare)
	if !slices.Equal(held, walked) {
		t.Fatalf("seed %d step %d (%s): held %v, a walk %v", seed, i, step, held, walked)
	}
	for ip, o := range p.offers {
		if p.offerOf[o.mac] != ip {
			t.Fatalf("seed %d step %d (%s): offer of %s to %s, offerOf %v", seed, i, step, ip, o.mac, p.offerOf[o.mac])
		}
	}
	if len(p.offerOf) != len(p.offers) {
		t.Fatalf("seed %d step %d (%s): %d offers, %d in offerOf", seed, i, step, len(p.offers), len(p.offerOf))
	}
	// byMAC names only leases its clients hold in the file, so it is bounded by the
	// range: a client whose address went to another keeps no entry.
	for mac, ip := range p.byMAC {
		if p.byIP[ip].MAC != mac {
			t.Fatalf("seed %d step %d (%s): byMAC keeps %s at %s, whose lease is %+v", seed, i, step, mac, ip, p.byIP[ip])
		}
	}
}

// walkUnknown is what unknownHeld counts, by a walk over every lease and offer: the
// addresses clients not known other than mac hold now.
func walkUnknown(p *Pool, mac string, now time.Time) int {
	n := 0
	seen := map[netip.Addr]bool{}
	for _, ip := range append(slices.Collect(maps.Keys(p.byIP)), slices.Collect(maps.Keys(p.offers))...) {
		if seen[ip] {
			continue
		}
		seen[ip] = true
		l, leased := p.byIP[ip]
		o, offered := p.offers[ip]
		byLease := leased && !l.Known && l.MAC != Declined && now.Before(l.Expiry)
		byOffer := offered && !o.known && now.Before(o.until)
		if byLease && l.MAC != mac || byOffer && o.mac != mac {
			n++
		}
	}
	return n
}

// heldNow reports whether a client not known holds ip now, by a lease or an offer.
func heldNow(p *Pool, ip netip.Addr, now time.Time) bool {
	l, leased := p.byIP[ip]
	o, offered := p.offers[ip]
	return leased && !l.Known && l.MAC != Declined && now.Before(l.Expiry) || offered && !o.known && now.Before(o.until)
}
