package boot

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot/inuse"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/testkit"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Addresses of the conflict tests: a host holds taken, configured by hand, the first
// address of netConfig's range, which the server would offer first.
const (
	taken      = "10.99.0.100"
	takenAsker = "02:00:00:00:03:01"
	takenMAC   = "02:00:00:00:03:02"
)

// conflictNet is the test network with a host at taken; its boot server checks
// addresses from a datagram ICMP socket when datagram is set (net.ipv4.ping_group_range
// admitting root's group in its namespace), else from a raw one.
func conflictNet(t *testing.T, datagram bool) testNet {
	t.Helper()
	n := newTestNet(t, "busybox")
	host := netns.New(t, "host")
	n.lan.Attach(t, host, "bch0", taken+"/24", takenMAC)
	if datagram {
		n.server.Run(t, "sh", "-c", "echo '0 0' > /proc/sys/net/ipv4/ping_group_range")
	}
	return n
}

// conflictLogged reports whether log names the conflict at taken with the MAC that would
// have got it.
func conflictLogged(log string) bool {
	return strings.Contains(log, "a host answers at this address inside the DHCP range") && strings.Contains(log, "ip="+taken+" mac="+takenAsker)
}

// TestAddressInUseIsNotLeased: beside a host at taken, busybox udhcpc, a real DHCP
// client, is leased another address, and the server's log names the conflict: the
// address and the MAC that would have got it; checked from a raw ICMP socket (root) and
// from a datagram one. Before the check, the client was leased the host's address.
func TestAddressInUseIsNotLeased(t *testing.T) {
	for _, socket := range []string{"raw", "datagram"} {
		t.Run(socket, func(t *testing.T) {
			n := conflictNet(t, socket == "datagram")
			srv := startServer(t, n.server, netConfig(t, Authoritative), nil)
			if ip := udhcpc(t, n, takenAsker)["ip"]; ip == "" || ip == taken {
				t.Errorf("udhcpc leased %q beside a host at %s, want another address", ip, taken)
			}
			log := srv.log.String()
			if !conflictLogged(log) {
				t.Error("the conflict is not in the server's log")
			}
			if !strings.Contains(log, "socket="+socket) {
				t.Errorf("no checks from a %s socket in the log", socket)
			}
		})
	}
}

// TestConflictCheckOff: with conflictCheck false the client is leased the host's
// address, as every client was before the check, and nothing is logged of it.
func TestConflictCheckOff(t *testing.T) {
	n := conflictNet(t, false)
	cfg := netConfig(t, Authoritative)
	cfg.ConflictCheck = new(false)
	srv := startServer(t, n.server, cfg, nil)
	if ip := udhcpc(t, n, takenAsker)["ip"]; ip != taken {
		t.Errorf("udhcpc leased %q with the check off, want %s", ip, taken)
	}
	if conflictLogged(srv.log.String()) {
		t.Error("a conflict logged with the check off")
	}
}

// TestHostAnsweringEverywhereLeavesAddresses: a host on the segment holds every address
// of a range of ten by `ip addr add`, so it answers the check's echo at each; busybox
// udhcpc, a real DHCP client, is still leased an address, and the server warns that the
// addresses held away take their share. Before the bound, every address was held away
// for a lease time within four DISCOVERs, and udhcpc got none.
func TestHostAnsweringEverywhereLeavesAddresses(t *testing.T) {
	n := newTestNet(t, "busybox")
	host := netns.New(t, "host")
	n.lan.Attach(t, host, "bch0", "10.99.0.100/24", "")
	for i := 101; i <= 109; i++ {
		host.Run(t, "ip", "addr", "add", fmt.Sprintf("10.99.0.%d/24", i), "dev", "bch0")
	}
	cfg := netConfig(t, Authoritative)
	cfg.Range.End = netip.MustParseAddr("10.99.0.109")
	srv := startServer(t, n.server, cfg, nil)
	if ip := udhcpc(t, n, takenAsker)["ip"]; ip == "" {
		t.Error("udhcpc leased nothing beside a host answering at every address of the range")
	}
	if log := srv.log.String(); !strings.Contains(log, "the addresses held away as in use take their share of a range") {
		t.Errorf("no warn of the share in the server's log:\n%s", log)
	}
}

// TestDecliningEveryOfferLeavesAddresses: a host takes every address it is offered under
// ever new MACs and declines it at once, as a client that found it in use would; on a
// range of sixteen it has two held away (an eighth, the default), and a machine is then
// still offered an address. The server warns of it once a minute. Before the bound, the
// host had the whole range held away for a lease time, and the machine got no offer.
func TestDecliningEveryOfferLeavesAddresses(t *testing.T) {
	cfg := authoritativeConfig(t, "10.9.0.115")
	clk := clock.NewFake(time.Unix(1e9, 0))
	log := &bytes.Buffer{}
	s, err := New(cfg, Deps{Entries: entries{}, Clock: clk, Log: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.DHCPHandler()
	decline := func(i int) bool {
		hw := net.HardwareAddr{0x02, 0, 0, 0, 0x0d, byte(i)}
		disc, _ := dhcpv4.NewDiscovery(hw)
		offer, ok := h(disc)
		if !ok {
			return false
		}
		req, _ := dhcpv4.NewRequestFromOffer(offer)
		if ack, ok := h(req); !ok || ack.MessageType() != dhcpv4.MessageTypeAck {
			return false
		}
		decl, _ := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline), dhcpv4.WithHwAddr(hw),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(offer.ServerIPAddr)))
		h(decl)
		return true
	}
	for i := range 48 {
		if !decline(i) {
			break
		}
	}
	machine, _ := net.ParseMAC("52:54:00:00:0d:01")
	disc, _ := dhcpv4.NewDiscovery(machine)
	if offer, ok := h(disc); !ok || offer.MessageType() != dhcpv4.MessageTypeOffer {
		t.Fatalf("no offer to a machine beside a host declining every offer: %v", offer)
	}
	const warn = "the addresses held away as in use take their share of a range"
	if n := strings.Count(log.String(), warn); n != 1 {
		t.Errorf("%d warns of the share within a minute, want 1:\n%s", n, log)
	}
	clk.Advance(time.Minute)
	decline(100)
	if n := strings.Count(log.String(), warn); n != 2 {
		t.Errorf("%d warns of the share after a minute, want 2", n)
	}
}

// TestCheckUnsentIsCounted: behind a relay, a rack subnet the server has no route to
// (its route deleted), so the kernel refuses the echo of each address's check (network
// unreachable, inuse.ErrNotSent); busybox udhcpc, a real DHCP client, is leased nothing,
// and bcd site's metrics, scraped from the server's /metrics, count every DISCOVER left
// so in bcd_dhcp_check_unsent_total and in bcd_dhcp_dropped_total, while the server warns
// of them once, not at each. Before, no metric counted them and each warned.
func TestCheckUnsentIsCounted(t *testing.T) {
	r := newRoutedNet(t, "busybox", "curl")
	r.server.Run(t, "ip", "route", "del", "10.96.0.0/14")
	srv := startServerSpec(t, r.server, serverSpec{Config: r.config(t), Metrics: true}, nil)
	r.startRelay(t)
	if env := udhcpc(t, testNet{lan: r.rack, server: r.server, client: r.rackClient}, "02:00:00:00:03:01"); env != nil {
		t.Fatalf("leased %v with no echo sent to its address", env)
	}
	unanswered := unsentCounted(t, r.server, srv)
	log := srv.log.String()
	if n := strings.Count(log, "the conflict check's echo to their address was not sent"); n != 1 || !strings.Contains(log, "discovers=1\n") ||
		!strings.Contains(log, "network is unreachable") || !strings.Contains(log, "add a route") || strings.Contains(log, "gc_thresh3") {
		t.Errorf("%d warns of %d DISCOVERs with their echo not sent within a minute, want 1 of discovers=1 naming the unreachable network "+
			"and a route to add, not the buffers:\n%s", n, unanswered, log)
	}
}

// unsentCounted checks that srv, serving in ns with its metrics on, counted every
// DISCOVER its log shows left unanswered for its unsent echo, at least one, in
// bcd_dhcp_check_unsent_total and in bcd_dhcp_dropped_total, and returns how many.
func unsentCounted(t *testing.T, ns *netns.NS, srv *bootServer) int {
	t.Helper()
	url := regexp.MustCompile(`url=(\S+)`).FindStringSubmatch(srv.log.String())
	if url == nil {
		t.Fatalf("no metrics URL in the server's log:\n%s", srv.log.String())
	}
	// The drop is counted once the handler returns, which may be just after the
	// client gave up: the counters are read until they agree with the log, for a while.
	var m map[string]float64
	unanswered := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		m = testkit.ParseMetrics(t, ns.Run(t, "curl", "-sSf", url[1]))
		unanswered = strings.Count(srv.log.String(), `msg="no address to offer"`)
		if m["bcd_dhcp_check_unsent_total"] == float64(unanswered) || time.Now().After(deadline) {
			break
		}
	}
	if unanswered == 0 {
		t.Fatalf("no DISCOVER left unanswered for its unsent echo in the log:\n%s", srv.log.String())
	}
	for _, series := range []string{"bcd_dhcp_check_unsent_total", "bcd_dhcp_dropped_total"} {
		if m[series] != float64(unanswered) {
			t.Errorf("%s is %v after %d DISCOVERs left unanswered for their unsent echo", series, m[series], unanswered)
		}
	}
	return unanswered
}

// TestEchoRefusedByTheKernelIsNotLeased: the server's interface drops every ICMP
// datagram it is given to send (u32 sorts them into an htb class whose pfifo queue has no
// room; DHCP and ARP go on), and the host at taken is a known neighbour, so the kernel
// refuses each check's echo to taken at the send: ENOBUFS, for real. busybox udhcpc, a
// real DHCP client, is leased nothing rather than the host's address unchecked; the
// DISCOVERs so left are counted in bcd_dhcp_check_unsent_total and warned of once, the
// warn naming the kernel's "no buffer space" and the buffers' remedy, not a route's. Once
// the interface sends ICMP again, the check finds the host and the client is leased
// another address: the refused checks were not taken as finding taken free.
func TestEchoRefusedByTheKernelIsNotLeased(t *testing.T) {
	netns.Require(t, "tc", "curl")
	n := conflictNet(t, false)
	n.server.Run(t, "ip", "neigh", "replace", taken, "lladdr", takenMAC, "dev", serverIf, "nud", "permanent")
	for _, tc := range [][]string{
		{"qdisc", "add", "dev", serverIf, "root", "handle", "1:", "htb", "default", "1"},
		{"class", "add", "dev", serverIf, "parent", "1:", "classid", "1:1", "htb", "rate", "1gbit"},
		{"class", "add", "dev", serverIf, "parent", "1:", "classid", "1:2", "htb", "rate", "1gbit"},
		{"qdisc", "add", "dev", serverIf, "parent", "1:2", "pfifo", "limit", "0"},
		{"filter", "add", "dev", serverIf, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "protocol", "1", "0xff", "flowid", "1:2"},
	} {
		n.server.Run(t, "tc", tc...)
	}
	srv := startServerSpec(t, n.server, serverSpec{Config: netConfig(t, Authoritative), Metrics: true}, nil)
	if env := udhcpc(t, n, takenAsker); env != nil {
		t.Fatalf("leased %s with every echo of the check refused by the kernel", env["ip"])
	}
	unanswered := unsentCounted(t, n.server, srv)
	log := srv.log.String()
	if w := strings.Count(log, "the conflict check's echo to their address was not sent"); w != 1 || !strings.Contains(log, "no buffer space available") ||
		!strings.Contains(log, "net.core.wmem_max") || strings.Contains(log, "add a route") {
		t.Errorf("%d warns of %d DISCOVERs with their echo refused within a minute, want 1 naming no buffer space and the buffers, not a route:\n%s", w, unanswered, log)
	}
	if conflictLogged(log) {
		t.Error("a conflict logged at taken though no echo was sent")
	}
	n.server.Run(t, "tc", "qdisc", "del", "dev", serverIf, "root")
	if ip := udhcpc(t, n, takenAsker)["ip"]; ip == "" || ip == taken {
		t.Errorf("udhcpc leased %q once the echoes were sent again beside a host at %s, want another address", ip, taken)
	}
	if !conflictLogged(srv.log.String()) {
		t.Error("the conflict is not in the server's log once the echoes were sent again")
	}
}

// TestCheckUnsentAdviceFollowsItsCause: the warn of a DHCPDISCOVER left unanswered for
// its check's unsent echo advises by the kernel's cause: no buffer, the buffer and
// neighbour settings or a smaller storm; no route, a route to add; never the other's.
func TestCheckUnsentAdviceFollowsItsCause(t *testing.T) {
	const buffers, route = "net.core.wmem_max", "add a route"
	for cause, advice := range map[syscall.Errno][2]string{
		syscall.ENOBUFS:      {buffers, route},
		syscall.EAGAIN:       {buffers, route},
		syscall.ENETUNREACH:  {route, buffers},
		syscall.EHOSTUNREACH: {route, buffers},
		syscall.EPERM:        {"boot.conflictCheck", buffers},
	} {
		t.Run(cause.Error(), func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1e9, 0))
			log := &bytes.Buffer{}
			s, err := New(authoritativeConfig(t, "10.9.0.115"), Deps{Entries: entries{}, Clock: clk, Log: slog.New(slog.NewTextHandler(log, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.checker.Store(inuse.NewChecker(func(ip netip.Addr) (bool, error) {
				return false, fmt.Errorf("%w to %s: %w", inuse.ErrNotSent, ip, &net.OpError{Op: "write", Net: "ip4:icmp", Err: os.NewSyscallError("sendto", cause)})
			}, clk, rememberFree))
			disc, _ := dhcpv4.NewDiscovery(net.HardwareAddr{0x52, 0x54, 0, 0, 0x0f, 1})
			if resp, ok := s.DHCPHandler()(disc); ok {
				t.Fatalf("answered %s with its address's echo not sent", resp.Summary())
			}
			if got := log.String(); !strings.Contains(got, advice[0]) || strings.Contains(got, advice[1]) {
				t.Errorf("the warn of an echo not sent for %v names %q: %v; %q: %v, want the first alone:\n%s",
					cause, advice[0], strings.Contains(got, advice[0]), advice[1], strings.Contains(got, advice[1]), got)
			}
		})
	}
}

// TestCheckUnsentWarnsOnceAMinute: DHCPDISCOVERs whose check's echo is not sent (the
// kernel's refusal, inuse.ErrNotSent, given by the checker's ping) warn once a minute,
// each warn with how many it stands for, and are all counted; before, each warned.
func TestCheckUnsentWarnsOnceAMinute(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	log := &bytes.Buffer{}
	obs := &unsentCounts{}
	s, err := New(authoritativeConfig(t, "10.9.0.115"), Deps{Entries: entries{}, Clock: clk, Observer: obs, Log: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.checker.Store(inuse.NewChecker(func(ip netip.Addr) (bool, error) {
		return false, fmt.Errorf("%w to %s: %w", inuse.ErrNotSent, ip, syscall.ENOBUFS)
	}, clk, rememberFree))
	h := s.DHCPHandler()
	discover := func(n int) {
		for i := range n {
			disc, _ := dhcpv4.NewDiscovery(net.HardwareAddr{0x52, 0x54, 0, 0, 0x0e, byte(i)})
			if resp, ok := h(disc); ok {
				t.Fatalf("answered %s with its address's echo not sent", resp.Summary())
			}
		}
	}
	const warn = "the conflict check's echo to their address was not sent"
	discover(3)
	if n := strings.Count(log.String(), warn); n != 1 || !strings.Contains(log.String(), "discovers=1\n") {
		t.Errorf("%d warns of 3 DISCOVERs within a minute, want 1 of discovers=1:\n%s", n, log)
	}
	clk.Advance(time.Minute)
	discover(1)
	if n := strings.Count(log.String(), warn); n != 2 || !strings.Contains(log.String(), "discovers=3\n") {
		t.Errorf("%d warns after a minute, want a second one of discovers=3 (the two held back and its own):\n%s", n, log)
	}
	if obs.unsent != 4 || obs.dropped != 4 {
		t.Errorf("counted %d unsent and %d dropped of 4 DISCOVERs left unanswered, want 4 and 4", obs.unsent, obs.dropped)
	}
}

// unsentCounts is an Observer counting the checks unsent and the drops.
type unsentCounts struct {
	counts
	unsent, dropped int
}

func (c *unsentCounts) DHCPCheckUnsent() { c.unsent++ }
func (c *unsentCounts) DHCPDropped()     { c.dropped++ }
