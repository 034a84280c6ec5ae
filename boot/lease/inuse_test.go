package lease

import (
	"errors"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
)

// TestUnleased: the addresses the server checks before an offer are those no lease
// accounts for: never leased, or whose lease of another client ended; not the client's
// own address (its lease, current or ended), nor one a client not known holds, which a
// known client takes over.
func TestUnleased(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	store := openStore(t, filepath.Join(t.TempDir(), "leases.db"))
	four := Range{Start: ip("10.9.1.1"), End: ip("10.9.1.4")}
	p, err := NewPool(store, four, nil, time.Hour, clk, Policy{Known: func(mac string) bool { return mac != "stranger" }, UnknownTTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	lease := func(mac string, ip netip.Addr) {
		t.Helper()
		if _, err := p.Offer(mac, ip); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Ack(mac, ip, Renewing); err != nil {
			t.Fatal(err)
		}
	}
	lease("ended", ip("10.9.1.1"))
	lease("own", ip("10.9.1.2"))
	clk.Advance(2 * time.Hour) // both leases end
	lease("stranger", ip("10.9.1.3"))
	cases := map[string]struct {
		mac  string
		ip   netip.Addr
		want bool
	}{
		"never leased":                            {"new", ip("10.9.1.4"), true},
		"another client's ended lease":            {"new", ip("10.9.1.1"), true},
		"the client's own ended lease":            {"own", ip("10.9.1.2"), false},
		"the client's own running lease":          {"stranger", ip("10.9.1.3"), false},
		"a stranger's lease a known client takes": {"new", ip("10.9.1.3"), false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := p.Unleased(c.mac, c.ip); got != c.want {
				t.Errorf("Unleased(%s, %s) = %v, want %v", c.mac, c.ip, got, c.want)
			}
		})
	}
}

// TestInUseHoldsTheAddressAway: an offered address a host answers at is held away as a
// declined one, for one lease time and across a restart: the client is offered another,
// nobody gets it until then; a second report of it, by another request of the same
// client, changes nothing.
func TestInUseHoldsTheAddressAway(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	path := filepath.Join(t.TempDir(), "leases.db")
	store := openStore(t, path)
	p, err := NewPool(store, rng, []netip.Addr{server}, time.Hour, clk, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	taken, _ := offerIP(p, "aa", netip.Addr{})
	if err := p.InUse("bb", taken); !errors.Is(err, ErrNotYours) {
		t.Fatalf("InUse of another client's offer: %v, want ErrNotYours", err)
	}
	if err := p.InUse("aa", taken); err != nil {
		t.Fatal(err)
	}
	if err := p.InUse("aa", taken); !errors.Is(err, ErrNotYours) {
		t.Errorf("InUse again: %v, want ErrNotYours", err)
	}
	next, _ := offerIP(p, "aa", netip.Addr{})
	if next == taken {
		t.Fatalf("offered %s again", taken)
	}
	if _, err := p.Ack("cc", taken, Renewing); !errors.Is(err, ErrNotYours) {
		t.Errorf("ack of the address in use: %v, want ErrNotYours", err)
	}
	if got, _ := offerIP(p, "cc", taken); got == taken {
		t.Errorf("another client asking for %s was offered it", taken)
	}
	store.Close()
	p, err = NewPool(openStore(t, path), rng, []netip.Addr{server}, time.Hour, clk, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(59 * time.Minute)
	if got, _ := offerIP(p, "dd", taken); got == taken {
		t.Errorf("after a restart, within the hour, %s was offered", taken)
	}
	clk.Advance(time.Minute)
	if got, _ := offerIP(p, "ee", taken); got != taken {
		t.Errorf("an hour on, %s offered when asked for, want it", got)
	}
}

// TestHeldAwayShare: on a range of eight with AwayShare a quarter, two addresses may be
// held away; a third found in use is not held (its offer ends, and it is offered again
// later), a third decline ends the client's lease at once as a release does, and the
// bound holds across a restart and lifts when a hold ends.
func TestHeldAwayShare(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	path := filepath.Join(t.TempDir(), "leases.db")
	store := openStore(t, path)
	eight := Range{Start: ip("10.9.2.1"), End: ip("10.9.2.8")}
	policy := Policy{AwayShare: 0.25}
	p, err := NewPool(store, eight, nil, time.Hour, clk, policy)
	if err != nil {
		t.Fatal(err)
	}
	for _, mac := range []string{"aa", "bb"} {
		if p.AwayFull() {
			t.Fatalf("full before %s's address is held away", mac)
		}
		a, _ := offerIP(p, mac, netip.Addr{})
		if err := p.InUse(mac, a); err != nil {
			t.Fatal(err)
		}
	}
	if !p.AwayFull() {
		t.Fatal("two addresses held away of eight with a share of a quarter: not full")
	}
	third, _ := offerIP(p, "cc", netip.Addr{})
	if err := p.InUse("cc", third); !errors.Is(err, ErrAwayShare) {
		t.Fatalf("InUse past the share: %v, want ErrAwayShare", err)
	}
	if !p.Unleased("dd", third) {
		t.Errorf("%s held after InUse past the share", third)
	}
	if got, _ := offerIP(p, "dd", third); got != third {
		t.Errorf("offered %s asking for the address not held, want it", got)
	}
	declined, _ := offerIP(p, "ee", netip.Addr{})
	if _, err := p.Ack("ee", declined, Renewing); err != nil {
		t.Fatal(err)
	}
	if err := p.Decline("ee", declined); !errors.Is(err, ErrAwayShare) {
		t.Fatalf("Decline past the share: %v, want ErrAwayShare", err)
	}
	if p.Holds("ee", declined) {
		t.Errorf("ee still holds %s after its decline", declined)
	}
	if got, _ := offerIP(p, "ff", declined); got != declined {
		t.Errorf("offered %s asking for the declined address not held, want it", got)
	}
	store.Close()
	p, err = NewPool(openStore(t, path), eight, nil, time.Hour, clk, policy)
	if err != nil {
		t.Fatal(err)
	}
	if !p.AwayFull() {
		t.Error("not full after a restart")
	}
	clk.Advance(time.Hour)
	if p.AwayFull() {
		t.Error("full after the holds ended")
	}
}
