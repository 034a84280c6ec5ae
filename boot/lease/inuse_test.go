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
		if _, err := p.Ack(mac, ip); err != nil {
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
	if _, err := p.Ack("cc", taken); !errors.Is(err, ErrNotYours) {
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
