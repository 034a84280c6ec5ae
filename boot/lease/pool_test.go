package lease

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/google/go-cmp/cmp"
)

var (
	rng    = Range{Start: netip.MustParseAddr("10.9.0.10"), End: netip.MustParseAddr("10.9.0.12")}
	server = netip.MustParseAddr("10.9.0.11")
	ip     = netip.MustParseAddr
)

func openStore(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newPool(t *testing.T, path string, clk Clock) *Pool {
	t.Helper()
	p, err := NewPool(openStore(t, path), rng, []netip.Addr{server}, time.Hour, clk, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOffer(t *testing.T) {
	type step struct {
		mac       string
		requested string
		ack       bool
		want      string
		err       error
	}
	cases := map[string]struct {
		steps []step
	}{
		"first address, skipping the server's": {steps: []step{
			{mac: "a", want: "10.9.0.10"},
			{mac: "b", want: "10.9.0.12"},
		}},
		"requested address when free": {steps: []step{
			{mac: "a", requested: "10.9.0.12", want: "10.9.0.12"},
		}},
		"requested address outside the range": {steps: []step{
			{mac: "a", requested: "10.9.1.1", want: "10.9.0.10"},
		}},
		"a client keeps its address": {steps: []step{
			{mac: "a", ack: true, want: "10.9.0.10"},
			{mac: "b", want: "10.9.0.12"},
			{mac: "a", requested: "10.9.0.12", want: "10.9.0.10"},
		}},
		"exhausted": {steps: []step{
			{mac: "a", want: "10.9.0.10"},
			{mac: "b", want: "10.9.0.12"},
			{mac: "c", err: ErrExhausted},
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := newPool(t, filepath.Join(t.TempDir(), "leases.db"), clock.NewFake(time.Unix(1e9, 0)))
			for i, s := range c.steps {
				var req netip.Addr
				if s.requested != "" {
					req = ip(s.requested)
				}
				got, err := offerIP(p, s.mac, req)
				if !errors.Is(err, s.err) {
					t.Fatalf("step %d: err %v, want %v", i, err, s.err)
				}
				if err != nil {
					continue
				}
				if diff := cmp.Diff(s.want, got.String()); diff != "" {
					t.Fatalf("step %d: %s", i, diff)
				}
				if s.ack {
					if _, err := p.Ack(s.mac, got, Renewing); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

func TestAckLifecycle(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	path := filepath.Join(t.TempDir(), "leases.db")
	p := newPool(t, path, clk)
	a, _ := offerIP(p, "aa", netip.Addr{})
	if _, err := p.Ack("aa", a, Renewing); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Ack("bb", a, Renewing); !errors.Is(err, ErrNotYours) {
		t.Fatalf("ack of a leased address to another client: %v", err)
	}
	if _, err := p.Ack("bb", server, Renewing); !errors.Is(err, ErrNotYours) {
		t.Fatalf("ack of the server's address: %v", err)
	}
	if _, err := p.Ack("bb", ip("10.9.1.1"), Renewing); !errors.Is(err, ErrNotYours) {
		t.Fatalf("ack outside the range: %v", err)
	}
	// An offer holds the address against others until it times out.
	b, _ := offerIP(p, "bb", netip.Addr{})
	if _, err := p.Ack("cc", b, Renewing); !errors.Is(err, ErrNotYours) {
		t.Fatalf("ack of another client's offer: %v", err)
	}
	clk.Advance(time.Minute)
	if _, err := p.Ack("cc", b, Renewing); err != nil {
		t.Fatalf("ack after the offer timed out: %v", err)
	}
	// After the lease ends, another client may have the address.
	clk.Advance(2 * time.Hour)
	if _, ok := lookup(p, "aa"); ok {
		t.Fatal("lease outlived its expiry")
	}
	if _, err := p.Ack("dd", a, Renewing); err != nil {
		t.Fatalf("ack of an expired lease's address: %v", err)
	}
	// Release and decline.
	if err := p.Release("dd", a); err != nil {
		t.Fatal(err)
	}
	if _, ok := lookup(p, "dd"); ok {
		t.Fatal("released lease still held")
	}
	l, _ := p.Ack("ee", a, Renewing)
	if err := p.Decline("ee", l.IP); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Ack("ff", a, Renewing); !errors.Is(err, ErrNotYours) {
		t.Fatalf("ack of a declined address: %v", err)
	}
}

func TestLeasesSurviveRestart(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	path := filepath.Join(t.TempDir(), "leases.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := NewPool(s, rng, []netip.Addr{server}, time.Hour, clk, Policy{})
	a, _ := offerIP(p, "aa", netip.Addr{})
	want, err := p.Ack("aa", a, Renewing)
	if err != nil {
		t.Fatal(err)
	}
	// Moving to another address ends the old lease in the same write.
	if _, err := p.Ack("aa", ip("10.9.0.12"), Renewing); err != nil {
		t.Fatal(err)
	}
	want, _ = lookup(p, "aa")
	s.Close()

	p = newPool(t, path, clk)
	got, ok := lookup(p, "aa")
	if !ok {
		t.Fatal("lease lost in the restart")
	}
	if diff := cmp.Diff(want.IP, got.IP, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Error(diff)
	}
	if !got.Expiry.Equal(want.Expiry) {
		t.Errorf("expiry %v, want %v", got.Expiry, want.Expiry)
	}
	if b, _ := offerIP(p, "bb", netip.Addr{}); b != a {
		t.Errorf("offer %v, want the ended lease's %v", b, a)
	}
}

// TestGroupCommit checks that exchanges arriving together share transactions, and that
// every lease is on disk when Ack returns.
func TestGroupCommit(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	path := filepath.Join(t.TempDir(), "leases.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	big := Range{Start: ip("10.9.0.0"), End: ip("10.9.3.255")}
	p, _ := NewPool(s, big, nil, time.Hour, clk, Policy{})
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			mac := fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff)
			a, err := offerIP(p, mac, netip.Addr{})
			if err == nil {
				_, err = p.Ack(mac, a, Renewing)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	t.Logf("%d leases in %d transactions", st.Records, st.Commits)
	if st.Records != n || st.Commits >= n {
		t.Errorf("stats %+v: want %d records in fewer transactions", st, n)
	}
	all, err := s.All()
	if err != nil || len(all) != n {
		t.Fatalf("%d leases stored (%v), want %d", len(all), err, n)
	}
	s.Close()
	if err := s.Put(Lease{IP: ip("10.9.0.1")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
}

// lookup returns mac's lease, if it holds one that has not ended.
func lookup(p *Pool, mac string) (Lease, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ip, ok := p.byMAC[mac]
	if !ok {
		return Lease{}, false
	}
	l := p.byIP[ip]
	return l, l.MAC == mac && p.clock.Now().Before(l.Expiry)
}

// offerIP is the address p offers mac.
func offerIP(p *Pool, mac string, requested netip.Addr) (netip.Addr, error) {
	l, err := p.Offer(mac, requested)
	return l.IP, err
}

// TestAckByClaim: a DHCPREQUEST is acknowledged by the record the pool keeps of its
// client as its state asks. Rebooting (INIT-REBOOT) to an address never offered or
// leased to the client fails with ErrNoRecord and stores nothing; to another address
// than its record with ErrNotYours; to its offer's or its ended lease's address it is
// acknowledged. Selecting an address other than the offer's fails with ErrNotYours.
// Renewing takes any free address, as before.
func TestAckByClaim(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	path := filepath.Join(t.TempDir(), "leases.db")
	p := newPool(t, path, clk)
	a, b := ip("10.9.0.10"), ip("10.9.0.12")

	if _, err := p.Ack("stranger", b, Rebooting); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("INIT-REBOOT of a client never offered nor leased an address: %v, want ErrNoRecord", err)
	}
	if p.Holds("stranger", b) || !p.Unleased("other", b) {
		t.Error("the refused INIT-REBOOT left a lease")
	}
	if _, err := p.Ack("stranger", ip("10.9.1.1"), Rebooting); !errors.Is(err, ErrNoRecord) {
		t.Errorf("INIT-REBOOT outside the range without a record: %v, want ErrNoRecord", err)
	}
	if _, err := p.Ack("stranger", b, Selecting); !errors.Is(err, ErrNotYours) {
		t.Errorf("SELECTING an address never offered: %v, want ErrNotYours", err)
	}

	o, err := p.Offer("aa", netip.Addr{})
	if err != nil || o.IP != a {
		t.Fatalf("offer %v, %v: want %s", o, err, a)
	}
	if _, err := p.Ack("aa", b, Selecting); !errors.Is(err, ErrNotYours) {
		t.Errorf("SELECTING another address than the offer's: %v, want ErrNotYours", err)
	}
	if _, err := p.Ack("aa", b, Rebooting); !errors.Is(err, ErrNotYours) {
		t.Errorf("INIT-REBOOT of another address than the offer's: %v, want ErrNotYours", err)
	}
	if _, err := p.Ack("aa", a, Selecting); err != nil {
		t.Fatalf("SELECTING the offer: %v", err)
	}
	if _, err := p.Ack("aa", b, Rebooting); !errors.Is(err, ErrNotYours) {
		t.Errorf("INIT-REBOOT of another address than the lease's: %v, want ErrNotYours", err)
	}
	clk.Advance(2 * time.Hour)
	if _, err := p.Ack("aa", a, Rebooting); err != nil {
		t.Errorf("INIT-REBOOT of the client's ended lease's address: %v", err)
	}
	if _, err := p.Ack("bb", b, Renewing); err != nil {
		t.Errorf("renewal of a free address without a record: %v", err)
	}
}

// Stats counts the store's work since it was opened.
type Stats struct {
	// Commits is the number of transactions, each one fsync.
	Commits uint64
	// Records is the number of leases written.
	Records uint64
}

// Stats returns the counts of transactions and records so far.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.stats.commits.Load(), Records: s.stats.records.Load()}
}
