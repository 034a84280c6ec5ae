package dhcp

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/better-compute/better-compute/boot/inuse"
	"github.com/better-compute/better-compute/boot/lease"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// checked is an authoritative server on a range of six, 10.9.0.100-105, whose checks
// find a host at the addresses of taken, counting the echoes to each address.
type checked struct {
	s         Authoritative
	store     *lease.Store
	log       *bytes.Buffer
	inUse     int
	awayShare int
	mu        sync.Mutex
	echoes    map[netip.Addr]int
}

func newChecked(t *testing.T, taken ...string) *checked {
	t.Helper()
	return newCheckedPolicy(t, lease.Policy{}, taken...)
}

// newCheckedPolicy is newChecked with policy for its pool.
func newCheckedPolicy(t *testing.T, policy lease.Policy, taken ...string) *checked {
	t.Helper()
	s, store := newAuthoritative(t)
	clk := clock.NewFake(time.Unix(1e9, 0))
	pool, err := lease.NewPool(store, lease.Range{Start: netip.MustParseAddr("10.9.0.100"), End: netip.MustParseAddr("10.9.0.105")}, nil, time.Hour, clk, policy)
	if err != nil {
		t.Fatal(err)
	}
	c := &checked{store: store, log: &bytes.Buffer{}, echoes: map[netip.Addr]int{}}
	hosts := map[netip.Addr]bool{}
	for _, a := range taken {
		hosts[netip.MustParseAddr(a)] = true
	}
	checker := inuse.NewChecker(func(ip netip.Addr) (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.echoes[ip]++
		return hosts[ip], nil
	}, clk, 30*time.Second)
	s.Subnets[0].Pool, s.InUse, s.AddressInUse, s.AwayShare = pool, checker.InUse, func() { c.inUse++ }, func() { c.awayShare++ }
	s.Log = slog.New(slog.NewTextHandler(c.log, nil))
	c.s = s
	return c
}

// total is the echoes sent so far.
func (c *checked) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.echoes {
		n += e
	}
	return n
}

// discover is a DHCPDISCOVER of mac.
func discover(t *testing.T, mac net.HardwareAddr) *dhcpv4.DHCPv4 {
	t.Helper()
	p, err := dhcpv4.NewDiscovery(mac)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAddressInUseIsNotOffered: a host answers at the first address of the range; a
// new client is offered the next, the conflict is logged at warn naming the address and
// the client, and counted; a second client is not offered it either, without another
// echo to it.
func TestAddressInUseIsNotOffered(t *testing.T) {
	c := newChecked(t, "10.9.0.100")
	c.offersTheNextAndTells(t, "mac="+mac.String())
	other := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 2}
	if offer, ok := c.s.Handle(discover(t, other)); !ok || offer.YourIPAddr.String() != "10.9.0.102" {
		t.Errorf("second client's offer %v, want 10.9.0.102", offer)
	}
	if n := c.echoes[netip.MustParseAddr("10.9.0.100")]; n != 1 {
		t.Errorf("%d echoes to the address in use, want 1: it is held away", n)
	}
}

// TestAddressInUseNotStoredIsTold: a host answers at the first address of the range
// while the lease file takes no writes; the address is held away all the same and the
// client offered the next, and the log says both that a host answers there (counted)
// and that its hold was not stored.
func TestAddressInUseNotStoredIsTold(t *testing.T) {
	c := newChecked(t, "10.9.0.100")
	c.store.Close()
	c.offersTheNextAndTells(t, "level=ERROR", "address held away not stored", lease.ErrClosed.Error())
}

// offersTheNextAndTells sends a DISCOVER of mac to a server that finds a host at
// 10.9.0.100: it is offered 10.9.0.101, the address in use is counted once, and the log
// warns of it, naming the address, and holds every one of more.
func (c *checked) offersTheNextAndTells(t *testing.T, more ...string) {
	t.Helper()
	offer, ok := c.s.Handle(discover(t, mac))
	if !ok || offer.YourIPAddr.String() != "10.9.0.101" {
		t.Fatalf("offer %v, want 10.9.0.101", offer)
	}
	if c.inUse != 1 {
		t.Errorf("told of %d addresses in use, want 1", c.inUse)
	}
	log := c.log.String()
	for _, want := range append([]string{"level=WARN", "a host answers at this address inside the DHCP range", "ip=10.9.0.100"}, more...) {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestOwnAddressIsNotChecked: a client's own lease is offered again without an echo,
// when it renews it as when its lease has ended.
func TestOwnAddressIsNotChecked(t *testing.T) {
	c := newChecked(t)
	offer, _ := c.s.Handle(discover(t, mac))
	req := client{msg: dhcpv4.MessageTypeRequest, requested: offer.YourIPAddr, serverID: serverIP}.packet(t)
	if ack, ok := c.s.Handle(req); !ok || ack.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("no DHCPACK: %v", ack)
	}
	before := c.total()
	if again, ok := c.s.Handle(discover(t, mac)); !ok || !again.YourIPAddr.Equal(offer.YourIPAddr) {
		t.Fatalf("offer %v, want %s again", again, offer.YourIPAddr)
	}
	if c.total() != before {
		t.Errorf("%d echoes for the client's own address", c.total()-before)
	}
}

// TestChecksPerDiscoverAreBounded: hosts answer at the first four addresses; the first
// DHCPDISCOVER is not answered after three echoes, its retransmission goes on from the
// fourth and is offered the fifth; no address is checked twice.
func TestChecksPerDiscoverAreBounded(t *testing.T) {
	c := newChecked(t, "10.9.0.100", "10.9.0.101", "10.9.0.102", "10.9.0.103")
	if resp, ok := c.s.Handle(discover(t, mac)); ok {
		t.Fatalf("answered %s with every address checked in use", resp.Summary())
	}
	if c.total() != maxChecks {
		t.Errorf("%d echoes for one DISCOVER, want %d", c.total(), maxChecks)
	}
	offer, ok := c.s.Handle(discover(t, mac))
	if !ok || offer.YourIPAddr.String() != "10.9.0.104" {
		t.Fatalf("retransmission's offer %v, want 10.9.0.104", offer)
	}
	for ip, n := range c.echoes {
		if n != 1 {
			t.Errorf("%d echoes to %s, want 1", n, ip)
		}
	}
	if c.inUse != 4 {
		t.Errorf("told of %d addresses in use, want 4", c.inUse)
	}
}

// TestCheckNotRunOffersNothing: a DHCPDISCOVER whose address's echo was not sent is not
// answered, the next address not tried, and the log says why; its retransmission checks
// the same address again and is offered it once a check finds it free.
func TestCheckNotRunOffersNothing(t *testing.T) {
	c := newChecked(t)
	sent := false
	c.s.InUse = func(netip.Addr) (bool, error) {
		if !sent {
			sent = true
			return false, inuse.ErrNotSent
		}
		return false, nil
	}
	if resp, ok := c.s.Handle(discover(t, mac)); ok {
		t.Fatalf("answered %s with its address not checked", resp.Summary())
	}
	if log := c.log.String(); !strings.Contains(log, "10.9.0.100 was not checked, so it is not offered") {
		t.Errorf("log lacks why the DISCOVER was not answered:\n%s", log)
	}
	if offer, ok := c.s.Handle(discover(t, mac)); !ok || offer.YourIPAddr.String() != "10.9.0.100" {
		t.Errorf("retransmission's offer %v, want 10.9.0.100 once checked", offer)
	}
}

// TestRetransmittedDiscoverSharesTheCheck: a client's DHCPDISCOVER sent again while the
// check of the address offered to it runs sends no echo of its own; both are offered
// that address once it is found free.
func TestRetransmittedDiscoverSharesTheCheck(t *testing.T) {
	c := newChecked(t)
	synctest.Test(t, func(t *testing.T) {
		answer := make(chan bool)
		echoes := 0
		checker := inuse.NewChecker(func(netip.Addr) (bool, error) { echoes++; return <-answer, nil }, clock.NewFake(time.Unix(1e9, 0)), 30*time.Second)
		c.s.InUse = checker.InUse
		offers := make(chan *dhcpv4.DHCPv4, 2)
		handle := func() {
			resp, _ := c.s.Handle(discover(t, mac))
			offers <- resp
		}
		go handle()
		synctest.Wait()
		go handle()
		synctest.Wait()
		if echoes != 1 {
			t.Fatalf("%d echoes with a retransmitted DISCOVER waiting, want 1", echoes)
		}
		answer <- false
		a, b := <-offers, <-offers
		if a == nil || b == nil || !a.YourIPAddr.Equal(b.YourIPAddr) || a.YourIPAddr.String() != "10.9.0.100" {
			t.Errorf("offers %v and %v, want both of 10.9.0.100", a, b)
		}
	})
}

// TestHostAnsweringEverywhereGetsItsShare: a host answers at every address of the range
// of six, whose held-away share is a third (two addresses). A client's DISCOVER holds
// two away and is offered the third unchecked; the next client is offered the fourth
// without an echo; each offer past the share is told.
func TestHostAnsweringEverywhereGetsItsShare(t *testing.T) {
	c := newCheckedPolicy(t, lease.Policy{AwayShare: 1.0 / 3}, "10.9.0.100", "10.9.0.101", "10.9.0.102", "10.9.0.103", "10.9.0.104", "10.9.0.105")
	offer, ok := c.s.Handle(discover(t, mac))
	if !ok || offer.YourIPAddr.String() != "10.9.0.102" {
		t.Fatalf("offer %v, want 10.9.0.102", offer)
	}
	if c.total() != 2 || c.inUse != 2 || c.awayShare != 1 {
		t.Errorf("%d echoes, %d in use, %d past the share: want 2, 2 and 1", c.total(), c.inUse, c.awayShare)
	}
	other := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 2}
	if offer, ok := c.s.Handle(discover(t, other)); !ok || offer.YourIPAddr.String() != "10.9.0.103" {
		t.Fatalf("second client's offer %v, want 10.9.0.103", offer)
	}
	if c.total() != 2 || c.awayShare != 2 {
		t.Errorf("%d echoes and %d past the share after the second offer, want 2 and 2", c.total(), c.awayShare)
	}
}

// TestDeclinesPastTheShareAreNotHeld: a client declining every address it is leased
// has two held away of six (a third); past them its declines only end its lease, and
// another client is still offered an address.
func TestDeclinesPastTheShareAreNotHeld(t *testing.T) {
	c := newCheckedPolicy(t, lease.Policy{AwayShare: 1.0 / 3})
	c.s.InUse = nil
	decliner := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 9}
	for range 12 {
		offer, ok := c.s.Handle(discover(t, decliner))
		if !ok {
			t.Fatal("the decliner got no offer")
		}
		req, _ := dhcpv4.NewRequestFromOffer(offer)
		if ack, ok := c.s.Handle(req); !ok || ack.MessageType() != dhcpv4.MessageTypeAck {
			t.Fatalf("no DHCPACK of %s", offer.YourIPAddr)
		}
		decl, _ := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline), dhcpv4.WithHwAddr(decliner),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverIP)))
		c.s.Handle(decl)
	}
	if c.awayShare != 10 {
		t.Errorf("%d declines past the share told, want 10", c.awayShare)
	}
	if offer, ok := c.s.Handle(discover(t, mac)); !ok || offer.MessageType() != dhcpv4.MessageTypeOffer {
		t.Errorf("no offer beside the decliner: %v", offer)
	}
}

// TestHostInRangeIsNotOfferedUnderLoad: a host configured by hand answers at an address
// inside the range, past the first thousand; 2,000 machines send their DHCPDISCOVERs at
// once, answered MaxInFlight at a time as Serve answers them, each address checked by a
// real ICMP echo from the server's namespace on a segment where nothing else answers. No
// machine is offered the host's address, and machines are offered addresses. Before, an
// echo the kernel refused to send (an unanswered echo holds its socket's buffer while ARP
// waits for the address, about 3 s, and 512 filled it) was taken as no answer: the
// addresses after the 512th were offered unchecked, the host's among them.
func TestHostInRangeIsNotOfferedUnderLoad(t *testing.T) {
	netns.RequireAlone(t)
	const hostAddr = "10.96.6.0" // the 1,281st address of the range
	s, _ := echoLAN(t, "10.96", hostAddr, "10.96.1.0", false)
	var (
		mu     sync.Mutex
		offers int
		wg     sync.WaitGroup
	)
	slots := make(chan struct{}, MaxInFlight)
	for i := range 2000 {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			m := net.HardwareAddr{0x02, 0xdd, 0, 0, byte(i >> 8), byte(i)}
			resp, ok := s.Handle(discover(t, m))
			if !ok {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			offers++
			if resp.YourIPAddr.String() == hostAddr {
				t.Errorf("%s offered %s, where a host answers", m, hostAddr)
			}
		})
	}
	wg.Wait()
	if offers == 0 {
		t.Error("no machine was offered an address")
	}
	t.Logf("%d of 2,000 DISCOVERs offered an address", offers)
}

// TestChecksPastTheDefaultBufferAreSent: more checks of addresses nothing answers at run
// at once than the default send buffer holds echoes of (512), from a raw and from a
// datagram ICMP socket, with a host at one of the addresses. The socket's send buffer, as
// read back from the kernel, holds the echoes asked for; every echo is sent, so every
// DISCOVER is answered, and none with the host's address. Before, the kernel refused the
// echoes past the 512th, and their DISCOVERs went unanswered.
func TestChecksPastTheDefaultBufferAreSent(t *testing.T) {
	netns.RequireAlone(t)
	for name, datagram := range map[string]bool{"raw": false, "datagram": true} {
		t.Run(name, func(t *testing.T) {
			checks := checksRoom(t)
			const hostAddr = "10.97.1.200" // the 256th address of the range
			s, echo := echoLAN(t, "10.97", hostAddr, "10.97.0.201", datagram)
			if kind := map[bool]string{true: "datagram", false: "raw"}[datagram]; echo.Kind() != kind {
				t.Fatalf("socket %q, want %q", echo.Kind(), kind)
			}
			if want := inuse.EchoesHeld(MaxInFlight, echoWait); echo.Room() < want {
				t.Fatalf("the send buffer holds %d echoes, want at least the %d asked for", echo.Room(), want)
			}
			var (
				mu         sync.Mutex
				unanswered int
				wg         sync.WaitGroup
			)
			for i := range checks {
				wg.Go(func() {
					m := net.HardwareAddr{0x02, 0xde, 0, 0, byte(i >> 8), byte(i)}
					resp, ok := s.Handle(discover(t, m))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case !ok:
						unanswered++
					case resp.YourIPAddr.String() == hostAddr:
						t.Errorf("%s offered %s, where a host answers", m, hostAddr)
					}
				})
			}
			wg.Wait()
			if unanswered > 0 {
				t.Errorf("%d of %d DISCOVERs checked at once unanswered: their echoes were not sent", unanswered, checks)
			}
		})
	}
}

// echoWait is the wait of echoLAN's checks, conflictCheckTimeout's default.
const echoWait = 500 * time.Millisecond

// echoLAN is an authoritative server of net.0.0/16, its address net.0.1, leasing from
// start up to net.20.255 and checking each address by a real ICMP echo from a namespace
// of its own (from a datagram socket when datagram is set, else a raw one), on a segment
// where only a host at hostAddr answers; and its Echo, whose send buffer is sized for
// MaxInFlight checks at once.
func echoLAN(t *testing.T, net16, hostAddr, start string, datagram bool) (Authoritative, *inuse.Echo) {
	t.Helper()
	lan := netns.NewLAN(t)
	srv, host := netns.New(t, "dhcp"), netns.New(t, "host")
	lan.Attach(t, srv, "bcs0", net16+".0.1/16", "")
	lan.Attach(t, host, "bch0", hostAddr+"/16", "")
	if datagram {
		srv.Run(t, "sh", "-c", "echo '0 0' > /proc/sys/net/ipv4/ping_group_range")
	}
	var echo *inuse.Echo
	if err := srv.Do(func() (err error) {
		echo, err = inuse.ListenEcho(echoWait, inuse.EchoesHeld(MaxInFlight, echoWait), inuse.Health{Failed: func(err error) { t.Errorf("the ICMP socket failed: %v", err) }, Back: func() {}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	store, err := lease.Open(filepath.Join(t.TempDir(), "leases.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clk := clock.NewFake(time.Unix(1e9, 0))
	pool, err := lease.NewPool(store, lease.Range{Start: netip.MustParseAddr(start), End: netip.MustParseAddr(net16 + ".20.255")}, nil, time.Hour, clk, lease.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	return Authoritative{ServerIP: net.ParseIP(net16 + ".0.1"), Subnets: []Subnet{{Prefix: netip.MustParsePrefix(net16 + ".0.0/16"), Pool: pool, Local: true}},
		Boot: boot, InUse: inuse.NewChecker(echo.Ping, clk, 30*time.Second).InUse, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, echo
}

// checksRoom is how many checks of addresses nothing answers at a test may run at once:
// each holds an entry of the host's neighbour table, which every namespace shares, for
// inuse.ARPWait, and the test leaves room for the host's own and other tests' entries
// (a namespace's linger a moment after it is deleted). It waits, up to half a minute,
// for room past the default send buffer's 512 echoes, and skips the test without it.
func checksRoom(t *testing.T) int {
	t.Helper()
	limit, ok := inuse.NeighbourLimit()
	if !ok {
		t.Skip("the host's neighbour table's limit is not readable here")
	}
	var used int
	for range 30 {
		b, err := os.ReadFile("/proc/net/stat/arp_cache")
		if err != nil {
			t.Skipf("the host's neighbour table's entries are not readable here: %v", err)
		}
		// The second line's first column: the table's entries, in hex.
		lines := strings.Split(string(b), "\n")
		if len(lines) < 2 {
			t.Fatalf("/proc/net/stat/arp_cache without a line of figures:\n%s", b)
		}
		n, err := strconv.ParseInt(strings.Fields(lines[1])[0], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		if used = int(n); limit-used-100 > 600 {
			return min(800, limit-used-100)
		}
		time.Sleep(time.Second)
	}
	t.Skipf("the host's neighbour table holds %d of its %d entries (net.ipv4.neigh.default.gc_thresh3): too few left for more than 512 checks at once", used, limit)
	return 0
}

// TestRangeFullBehindAnAddressInUse: five clients hold 10.9.0.100-104 and a host answers
// at 10.9.0.105, the last free address. A sixth client's DHCPDISCOVER finds the host, and
// then no address: it goes unanswered as a full range does, Exhausted is told of it (not
// the unsent check's hook: nothing failed to send), and no echo goes to any address but
// the host's. Before, the failed offer after the host's address was dropped, and the
// next check ran on the zero address: the echo found no host there, and the client was
// offered 0.0.0.0.
func TestRangeFullBehindAnAddressInUse(t *testing.T) {
	c := newChecked(t, "10.9.0.105")
	for i := range 5 {
		holder := net.HardwareAddr{0x52, 0x54, 0, 0, 1, byte(i)}
		offer, ok := c.s.Handle(discover(t, holder))
		if !ok {
			t.Fatalf("client %d got no offer", i)
		}
		req, _ := dhcpv4.NewRequestFromOffer(offer)
		if ack, ok := c.s.Handle(req); !ok || ack.MessageType() != dhcpv4.MessageTypeAck {
			t.Fatalf("no DHCPACK of %s", offer.YourIPAddr)
		}
	}
	c.mu.Lock()
	clear(c.echoes) // the holders' own checks
	c.mu.Unlock()
	exhausted, unsent := 0, 0
	c.s.Exhausted = func() { exhausted++ }
	c.s.CheckUnsent = func(error) { unsent++ }
	if resp, ok := c.s.Handle(discover(t, mac)); ok {
		t.Fatalf("answered %s with the range full", resp.Summary())
	}
	if exhausted != 1 || unsent != 0 || c.inUse != 1 {
		t.Errorf("told %d exhausted, %d unsent checks, %d addresses in use; want 1, 0 and 1", exhausted, unsent, c.inUse)
	}
	for ip, n := range c.echoes {
		if ip != netip.MustParseAddr("10.9.0.105") || n != 1 {
			t.Errorf("%d echoes to %v, want one to 10.9.0.105 only", n, ip)
		}
	}
}
