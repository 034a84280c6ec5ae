package lease

import (
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
)

// four is a range of four addresses.
var four = Range{Start: ip("10.9.1.1"), End: ip("10.9.1.4")}

// knownSet is a Policy.Known of the MACs in it.
type knownSet map[string]bool

func (k knownSet) known(mac string) bool { return k[mac] }

func policyPool(t *testing.T, s *Store, clk Clock, k knownSet, share float64) *Pool {
	t.Helper()
	p, err := NewPool(s, four, nil, time.Hour, clk, Policy{Known: k.known, UnknownShare: share, UnknownTTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// lease has mac offered an address and acknowledged it.
func lease(t *testing.T, p *Pool, mac string) Lease {
	t.Helper()
	o, err := p.Offer(mac, netip.Addr{})
	if err != nil {
		t.Fatalf("offer to %s: %v", mac, err)
	}
	l, err := p.Ack(mac, o.IP, Renewing)
	if err != nil {
		t.Fatalf("ack to %s: %v", mac, err)
	}
	return l
}

// stored is the lease file's lease of ip.
func stored(t *testing.T, s *Store, a netip.Addr) Lease {
	t.Helper()
	all, err := s.All()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(l Lease) bool { return l.IP == a })
	if i < 0 {
		t.Fatalf("no lease of %s in the file", a)
	}
	return all[i]
}

// TestUnknownClientsHoldAtMostTheirShare: as a host sending under many MACs would, the
// clients not known take half the range and no more, by DHCPDISCOVER or by a
// DHCPREQUEST of a free address without one; their leases are short, their renewals
// are granted, and when one ends another client not known may take its place.
func TestUnknownClientsHoldAtMostTheirShare(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	s := openStore(t, filepath.Join(t.TempDir(), "leases.db"))
	p := policyPool(t, s, clk, knownSet{"k1": true}, 0.5)
	u1, u2 := lease(t, p, "u1"), lease(t, p, "u2")
	if got := u1.Expiry.Sub(clk.Now()); got != 10*time.Minute || u1.Known {
		t.Errorf("lease of a client not known: %s, known %v; want 10m, not known", got, u1.Known)
	}
	if _, err := p.Offer("u3", netip.Addr{}); !errors.Is(err, ErrUnknownShare) {
		t.Fatalf("offer to a third client not known: %v, want ErrUnknownShare", err)
	}
	for _, a := range []netip.Addr{ip("10.9.1.3"), ip("10.9.1.4")} {
		if _, err := p.Ack("u3", a, Renewing); !errors.Is(err, ErrUnknownShare) {
			t.Fatalf("request of free %s by a third client not known: %v, want ErrUnknownShare", a, err)
		}
	}
	// A known client still gets an address, with the long lease.
	if k1 := lease(t, p, "k1"); k1.Expiry.Sub(clk.Now()) != time.Hour || !k1.Known {
		t.Errorf("known client's lease %+v, want an hour, known", k1)
	}
	clk.Advance(5 * time.Minute)
	if _, err := p.Ack("u1", u1.IP, Renewing); err != nil {
		t.Fatalf("renewal within the share: %v", err)
	}
	clk.Advance(6 * time.Minute) // u2's lease ended, u1's renewal runs
	if p.Holds("u2", u2.IP) {
		t.Fatal("lease of a client not known outlived its 10m")
	}
	lease(t, p, "u3")
	if _, err := p.Offer("u4", netip.Addr{}); !errors.Is(err, ErrUnknownShare) {
		t.Fatalf("offer beyond the share: %v, want ErrUnknownShare", err)
	}
}

// TestKnownClientTakesOldestUnknownLease: clients not known (no bound) hold the whole
// range; a known client takes the address of the lease renewed longest ago, which ends
// in the lease file in the same write, and whose holder's renewal is refused; a second
// known client the next oldest, passing over the lease of a client that became known.
func TestKnownClientTakesOldestUnknownLease(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	s := openStore(t, filepath.Join(t.TempDir(), "leases.db"))
	k := knownSet{"k1": true, "k2": true}
	p := policyPool(t, s, clk, k, 1)
	held := map[string]Lease{}
	for _, mac := range []string{"u1", "u2", "u3", "u4"} {
		held[mac] = lease(t, p, mac)
		clk.Advance(time.Minute)
	}
	if _, err := p.Ack("u2", held["u2"].IP, Renewing); err != nil { // u2 renews: u3 is now older
		t.Fatal(err)
	}
	k["u3"] = true // u3 is enrolled: its lease, granted before, is kept
	k1 := lease(t, p, "k1")
	if k1.IP != held["u1"].IP {
		t.Fatalf("known client got %s, want %s of the oldest lease of a client not known", k1.IP, held["u1"].IP)
	}
	if got := stored(t, s, k1.IP); got.MAC != "k1" || !got.Known {
		t.Errorf("lease file holds %+v for %s, want k1's known lease", got, k1.IP)
	}
	if _, err := p.Ack("u1", held["u1"].IP, Renewing); !errors.Is(err, ErrNotYours) {
		t.Errorf("renewal of the lease taken: %v, want ErrNotYours", err)
	}
	if p.Holds("u1", held["u1"].IP) {
		t.Error("the client whose lease was taken still holds it")
	}
	if k2 := lease(t, p, "k2"); k2.IP != held["u4"].IP {
		t.Errorf("second known client got %s, want %s (u3 became known, u2 renewed)", k2.IP, held["u4"].IP)
	}
}

// TestKnownLeaseIsNeverTaken: with every address leased to known clients, no client,
// known or not, gets one, by DHCPDISCOVER or by DHCPREQUEST, until a lease ends.
func TestKnownLeaseIsNeverTaken(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	s := openStore(t, filepath.Join(t.TempDir(), "leases.db"))
	k := knownSet{"k1": true, "k2": true, "k3": true, "k4": true, "k5": true}
	p := policyPool(t, s, clk, k, 0.5)
	var addrs []netip.Addr
	for _, mac := range []string{"k1", "k2", "k3", "k4"} {
		addrs = append(addrs, lease(t, p, mac).IP)
	}
	if _, err := p.Offer("k5", netip.Addr{}); !errors.Is(err, ErrExhausted) {
		t.Errorf("offer to a fifth known client: %v, want ErrExhausted", err)
	}
	if _, err := p.Offer("u1", netip.Addr{}); !errors.Is(err, ErrExhausted) {
		t.Errorf("offer to a client not known: %v, want ErrExhausted", err)
	}
	for _, a := range addrs {
		for _, mac := range []string{"k5", "u1"} {
			if _, err := p.Ack(mac, a, Renewing); !errors.Is(err, ErrNotYours) {
				t.Errorf("request of known %s by %s: %v, want ErrNotYours", a, mac, err)
			}
		}
	}
}

// TestPolicySurvivesRestart: a restarted pool reads from the lease file which leases
// are of clients not known: they still fill their share, and a known client still
// takes the address of one of them, never a known client's.
func TestPolicySurvivesRestart(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	path := filepath.Join(t.TempDir(), "leases.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	k := knownSet{"k1": true, "k2": true, "k3": true}
	p := policyPool(t, s, clk, k, 0.5)
	known := []netip.Addr{lease(t, p, "k1").IP, lease(t, p, "k2").IP}
	u1 := lease(t, p, "u1")
	clk.Advance(time.Minute)
	lease(t, p, "u2")
	s.Close()

	p = policyPool(t, openStore(t, path), clk, k, 0.5)
	if _, err := p.Offer("u3", netip.Addr{}); !errors.Is(err, ErrUnknownShare) {
		t.Errorf("offer to a third client not known after the restart: %v, want ErrUnknownShare", err)
	}
	k3 := lease(t, p, "k3")
	if k3.IP != u1.IP || slices.Contains(known, k3.IP) {
		t.Errorf("known client got %s after the restart, want %s of the oldest lease of a client not known", k3.IP, u1.IP)
	}
}

// TestOneOfferPerClient: a client not known that asks for every address of the range in
// turn, by DHCPDISCOVERs naming each, holds one offer, the last, and not the whole
// range: another client not known still gets an offer within the share.
func TestOneOfferPerClient(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	p := policyPool(t, openStore(t, filepath.Join(t.TempDir(), "leases.db")), clk, knownSet{}, 0.5)
	var last Lease
	for a := four.Start; a.Compare(four.End) <= 0; a = a.Next() {
		o, err := p.Offer("u1", a)
		if err != nil {
			t.Fatalf("offer of %s to u1: %v", a, err)
		}
		last = o
	}
	if last.IP != four.End {
		t.Fatalf("u1 offered %s, want %s it asked for", last.IP, four.End)
	}
	if o, err := p.Offer("u2", netip.Addr{}); err != nil || o.IP == last.IP {
		t.Fatalf("offer to u2 after u1 asked for every address: %+v, %v; want an address other than u1's %s", o, err, last.IP)
	}
	// A DHCPDISCOVER sent again is offered the same address.
	if o, err := p.Offer("u1", netip.Addr{}); err != nil || o.IP != last.IP {
		t.Fatalf("u1 asking again: %+v, %v; want its offer of %s", o, err, last.IP)
	}
}
