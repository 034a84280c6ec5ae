package boot

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot/lease"
	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/testkit"
)

// BenchmarkDHCPExchanges measures full DHCP exchanges (DISCOVER, OFFER, REQUEST, ACK) per
// second that the authoritative server sustains with under 1% drops, and the same for
// dnsmasq on the same veth, both driven by Kea's perfdhcp as a relay agent. The two
// alternate over testkit.PairRounds rounds; within a round each side's maxRate search
// starts every probe on a freshly started server with an empty lease store, so each probe
// measures the same state on both sides. It reports the median of the within-round ratios
// (ours over dnsmasq's, above 1: the boot server sustains more) with their minimum and
// maximum, logs each round's two rates and each side's median. Every acknowledged lease,
// ours and dnsmasq's, is on disk (fsync) before its DHCPACK. perfdhcp plays the
// machines of perfClients, each of which the boot server knows by its entry, as it
// knows the machines it deploys. Both check each address before they offer it, as they
// do by default (the boot server's conflictCheck, dnsmasq's ping): no host answers at
// the range's addresses, so every check waits its whole time, 500 ms the boot server's
// and 3 s dnsmasq's.
func BenchmarkDHCPExchanges(b *testing.B) {
	netns.Require(b, "perfdhcp", "dnsmasq")
	srvNS, cliNS, cfg := benchNet(b)
	macs, entries := perfClients(b)
	rounds := testkit.PairRounds(b)
	for range b.N {
		var ourEchoes, peerEchoes []int
		p := testkit.RunPairs(rounds, testkit.OursOverPeer, func() float64 {
			return countEchoes(b, srvNS, &ourEchoes, func() float64 {
				return maxRate(b, cliNS, macs, "boot server", func() (stop func()) {
					cfg.LeaseFile = filepath.Join(b.TempDir(), "leases.db")
					return startServer(b, srvNS, cfg, entries).stop
				})
			})
		}, func() float64 {
			return countEchoes(b, srvNS, &peerEchoes, func() float64 {
				return maxRate(b, cliNS, macs, "dnsmasq", func() (stop func()) {
					return runDnsmasq(b, srvNS, serverIf, dnsmasqRange...)
				})
			})
		})
		for i := range p.Ratios {
			b.Logf("round %d: boot server %.1f/s, dnsmasq %.1f/s, ratio %.2f; ICMP echoes sent (address checks): boot server %d, dnsmasq %d",
				i+1, p.Ours[i], p.Peer[i], p.Ratios[i], ourEchoes[i], peerEchoes[i])
		}
		if err := sameChecks(ourEchoes, peerEchoes); err != nil {
			b.Error(err)
		}
		p.Report(b, "", "boot server/dnsmasq", "boot server", "dnsmasq", "exchanges/s")
	}
}

// countEchoes runs side and appends to echoes the ICMP echoes srvNS sent meanwhile: the
// checks of addresses of the server side started there.
func countEchoes(b *testing.B, srvNS *netns.NS, echoes *[]int, side func() float64) float64 {
	b.Helper()
	before := echoesSent(b, srvNS)
	f := side()
	*echoes = append(*echoes, echoesSent(b, srvNS)-before)
	return f
}

// BenchmarkDHCPExchangesFilled is BenchmarkDHCPExchanges with every probe's server
// started on a lease store that already holds filledLeases leases of other machines (a
// rack that has booted before, its machines known when they were leased), spread
// evenly over the range and valid for an hour: the boot server on a bbolt file written
// beforehand, dnsmasq on a lease file of the same leases. The search starts at
// filledStart exchanges a second, as dnsmasq's rate falls with every lease it holds; a
// side that sustains not even that scores 0.
func BenchmarkDHCPExchangesFilled(b *testing.B) {
	netns.Require(b, "perfdhcp", "dnsmasq")
	srvNS, cliNS, cfg := benchNet(b)
	macs, entries := perfClients(b)
	n := filledLeases(b)
	store, dnsmasqLeases := filledStores(b, cfg, n)
	rounds := testkit.PairRounds(b)
	for range b.N {
		var ourEchoes, peerEchoes []int
		p := testkit.RunPairs(rounds, testkit.OursOverPeer, func() float64 {
			return countEchoes(b, srvNS, &ourEchoes, func() float64 {
				return maxRateFrom(b, cliNS, macs, "boot server", filledStart, func() (stop func()) {
					cfg.LeaseFile = filepath.Join(b.TempDir(), "leases.db")
					if err := os.WriteFile(cfg.LeaseFile, store, 0o600); err != nil {
						b.Fatal(err)
					}
					return startServer(b, srvNS, cfg, entries).stop
				})
			})
		}, func() float64 {
			return countEchoes(b, srvNS, &peerEchoes, func() float64 {
				return maxRateFrom(b, cliNS, macs, "dnsmasq", filledStart, func() (stop func()) {
					return runDnsmasqLeases(b, srvNS, serverIf, dnsmasqLeases, dnsmasqRange...)
				})
			})
		})
		for i := range p.Ratios {
			b.Logf("round %d, %d leases held: boot server %.1f/s, dnsmasq %.1f/s, ratio %.2f; ICMP echoes sent (address checks): boot server %d, dnsmasq %d",
				i+1, n, p.Ours[i], p.Peer[i], p.Ratios[i], ourEchoes[i], peerEchoes[i])
		}
		if err := sameChecks(ourEchoes, peerEchoes); err != nil {
			b.Error(err)
		}
		b.ReportMetric(testkit.Median(p.Ours), "boot-server-exchanges/s")
		b.ReportMetric(testkit.Median(p.Peer), "dnsmasq-exchanges/s")
		p.Report(b, "", fmt.Sprintf("boot server/dnsmasq, %d leases held:", n), "boot server", "dnsmasq", "exchanges/s")
	}
}

// filledStart is where BenchmarkDHCPExchangesFilled's search starts, in exchanges a second.
const filledStart = 10

// filledLeases is how many leases BenchmarkDHCPExchangesFilled's stores hold: 5,000, or
// BC_DHCP_LEASES.
func filledLeases(b *testing.B) int {
	return envCount(b, "BC_DHCP_LEASES", 5000, 0, 40000, "leases")
}

// filledStores writes n leases of other machines, known when they were leased, spread
// evenly over cfg's range and ending in an hour, as the boot server's lease file (its
// bytes) and as dnsmasq's.
func filledStores(b *testing.B, cfg Config, n int) (store, dnsmasqLeases []byte) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "filled.db")
	s, err := lease.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	start := cfg.Range.Start.As4()
	size := int(binary.BigEndian.Uint32(cfg.Range.End.AsSlice()) - binary.BigEndian.Uint32(start[:]) + 1)
	expiry := time.Now().Add(time.Hour).Truncate(time.Second)
	var ls []lease.Lease
	var text bytes.Buffer
	for i := range n {
		ip := netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, binary.BigEndian.Uint32(start[:])+uint32(i*size/n))))
		mac := net.HardwareAddr{0x02, 0xcc, 0, byte(i >> 16), byte(i >> 8), byte(i)}
		ls = append(ls, lease.Lease{MAC: mac.String(), IP: ip, Expiry: expiry, Known: true})
		fmt.Fprintf(&text, "%d %s %s * *\n", expiry.Unix(), mac, ip)
	}
	if err := s.Put(ls...); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	store, err = os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return store, text.Bytes()
}

// benchNet is a segment for benchmarks: the server's namespace at 10.99.0.1/16, a
// client's at 10.99.0.250/16, and an authoritative config leasing 51,200 addresses.
func benchNet(b *testing.B) (srvNS, cliNS *netns.NS, cfg Config) {
	b.Helper()
	lan, srvNS, cfg := benchServer(b)
	cliNS = netns.New(b, "bench")
	lan.Attach(b, cliNS, clientIf, "10.99.0.250/16", "")
	return srvNS, cliNS, cfg
}

// perfMachines is how many machines perfdhcp plays.
const perfMachines = 40000

// perfClients writes the MACs of the machines perfdhcp plays, one a line, for its -M
// (each exchange is of one of them, drawn at random), and gives each a ramdisk entry:
// machines being deployed, which the boot server knows, as the storms' machines.
func perfClients(b *testing.B) (file string, entries map[string]Entry) {
	b.Helper()
	var list strings.Builder
	entries = map[string]Entry{}
	for i := range perfMachines {
		mac := net.HardwareAddr{0x02, 0xdd, 0, byte(i >> 16), byte(i >> 8), byte(i)}.String()
		fmt.Fprintln(&list, mac)
		entries[mac] = Entry{Kind: KindRamdisk, Ramdisk: Ramdisk{Kernel: "vmlinuz", Initrd: "initrd.img", Token: "rt_perf", Args: []string{"console=ttyS0"}}}
	}
	file = filepath.Join(b.TempDir(), "macs")
	if err := os.WriteFile(file, []byte(list.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return file, entries
}

// benchServer is benchNet's segment with only the server's namespace on it.
func benchServer(b *testing.B) (lan *netns.LAN, srvNS *netns.NS, cfg Config) {
	b.Helper()
	lan = netns.NewLAN(b)
	srvNS = netns.New(b, "boot")
	lan.Attach(b, srvNS, serverIf, serverAddr+"/16", "")
	cfg = Config{Interface: serverIf, Mode: Authoritative, ServerIP: netip.MustParseAddr(serverAddr), IPXEDir: b.TempDir(),
		RamdiskDir: b.TempDir(), Subnet: netip.MustParsePrefix("10.99.0.0/16"),
		Range:     Range{Start: netip.MustParseAddr("10.99.1.0"), End: netip.MustParseAddr("10.99.200.255")},
		LeaseFile: filepath.Join(b.TempDir(), "leases.db")}
	return lan, srvNS, cfg
}

// dnsmasqRange makes dnsmasq lease the same addresses as benchNet's config, without
// logging each exchange and without its default limit of 1,000 leases; it checks an
// address before it offers it, as the boot server does by default.
var dnsmasqRange = []string{"--dhcp-range=10.99.1.0,10.99.200.255,255.255.0.0,1h", "--dhcp-lease-max=100000", "--quiet-dhcp"}

// perfRun is one perfdhcp run's outcome.
type perfRun struct {
	sent  float64 // DISCOVERs per second
	rate  float64 // completed exchanges (DHCPACKs) per second
	drops float64 // share of DISCOVERs that got no DHCPACK
}

// perfPeriod is how long each perfdhcp run sends.
const perfPeriod = 3

// perfExitWait is how long perfdhcp waits for the exchanges running when it stops
// sending: as long as it waits for any (its drop time, 1 s), so that the last
// DISCOVERs, whose offers come after the server's check of their address, count as
// those before them do. At 500 ms, what it waited before the check, the last DISCOVERs
// of each run were dropped (2% at 100/s), whichever the server's rate.
const perfExitWait = time.Second

var (
	statsRE = regexp.MustCompile(`(?s)Statistics for: DISCOVER-OFFER\*+\s+sent packets: (\d+).*Statistics for: REQUEST-ACK\*+\s+sent packets: \d+\s+received packets: (\d+)`)
)

// perfdhcp runs perfdhcp from ns against the server at rate exchanges per second for 3
// s, as the machines whose MACs the file macs lists. perfdhcp takes an exchange as lost
// after a second (its default), and waits perfExitWait after the last DISCOVER for the
// exchanges still running.
func perfdhcp(b *testing.B, ns *netns.NS, macs string, rate int) perfRun {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := ns.Command(ctx, "perfdhcp", "-4", "-l", clientIf, "-r", strconv.Itoa(rate), "-p", strconv.Itoa(perfPeriod),
		"-M", macs, "-W", strconv.Itoa(int(perfExitWait/time.Microsecond)), serverAddr).CombinedOutput()
	s := statsRE.FindSubmatch(out)
	if s == nil {
		b.Fatalf("perfdhcp at %d/s: %v\n%s", rate, err, out)
	}
	sent, _ := strconv.ParseFloat(string(s[1]), 64)
	acked, _ := strconv.ParseFloat(string(s[2]), 64)
	return perfRun{sent: sent / perfPeriod, rate: acked / perfPeriod, drops: 1 - acked/sent}
}

// Search bounds of maxRate: the first probe's target, well below either server's rate; no
// target above searchCeiling is tried; bisection stops when the failed target is within
// searchPrecision of the passed one.
const (
	searchStart     = 50
	searchCeiling   = 64000
	searchPrecision = 1.05
)

// maxRate finds the highest rate of completed exchanges with under 1% drops, at a rate
// perfdhcp managed to send (90% of its target), of the server that start starts, perfdhcp
// playing the machines the file macs lists. Every probe runs against a server of its
// own, started before it and stopped after it, so no probe sees the leases of another and their order does not matter: the target doubles
// from searchStart until a target fails, then the interval between the last passed and
// the failed target is bisected (at its geometric middle) until the two are within
// searchPrecision. A target fails when two probes at it failed: on shared cores a moment
// of other work fails one probe far below either server's limit, and as one failure ends
// the doubling, the figure fell with the first such moment. It returns the passed
// probes' highest rate, 0 when even the first target failed. name labels the probes,
// which it logs under -test.v only: without it the testing package keeps a benchmark's
// first ten lines of log, and the rounds' come last.
func maxRate(b *testing.B, ns *netns.NS, macs, name string, start func() (stop func())) float64 {
	b.Helper()
	return maxRateFrom(b, ns, macs, name, searchStart, start)
}

// maxRateFrom is maxRate with the search's first target first.
func maxRateFrom(b *testing.B, ns *netns.NS, macs, name string, first int, start func() (stop func())) float64 {
	b.Helper()
	best := 0.0
	ok := func(target int) bool {
		stop := start()
		r := perfdhcp(b, ns, macs, target)
		stop()
		pass := r.drops < 0.01 && r.sent >= 0.9*float64(target)
		if testing.Verbose() {
			b.Logf("%s target %5d/s: sent %7.1f/s, exchanges %7.1f/s, drops %5.2f%% pass=%v", name, target, r.sent, r.rate, 100*r.drops, pass)
		}
		if pass {
			best = max(best, r.rate)
		}
		return pass
	}
	lo, hi := 0, first
	for ok(hi) {
		lo, hi = hi, 2*hi
		if hi > searchCeiling {
			return best
		}
	}
	if lo == 0 {
		b.Logf("%s: no rate from %d/s up passed", name, first)
		return 0
	}
	for float64(hi) > searchPrecision*float64(lo) {
		mid := int(math.Round(math.Sqrt(float64(lo) * float64(hi))))
		if mid <= lo || mid >= hi {
			break
		}
		if ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return best
}
