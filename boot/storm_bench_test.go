package boot

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/pin/tftp/v3"

	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/testkit"
)

// stormClients is how many machines boot at once in the storm benchmarks: 1,000, or
// BC_STORM_CLIENTS (a smaller storm checks a change quickly).
func stormClients(b *testing.B) int {
	return envCount(b, "BC_STORM_CLIENTS", 1000, 1, stormAddrs, "machines")
}

// envCount is the number the environment variable name holds, def when it is unset; the
// benchmark fails unless it is a number of what from lo to hi.
func envCount(b *testing.B, name string, def, lo, hi int, what string) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		b.Fatalf("%s=%q: want a number of %s from %d to %d", name, s, what, lo, hi)
	}
	return n
}

// The files of a storm: undionly.kpxe the size of Debian's (74,213 bytes), a kernel
// and an initrd.
const (
	stormIPXESize   = 74213
	stormKernelSize = 8 << 20
	stormInitrdSize = 16 << 20
)

// pxeStormHelper is the helper name (helperEnv) of the PXE storm client.
const pxeStormHelper = "pxestorm"

// BenchmarkBootStorm powers on stormClients simulated BIOS machines at once. Each does
// what PXE firmware and then iPXE do: DHCP as a PXE client (option 93 = 0), a TFTP read
// of the boot file it was given (undionly.kpxe), DHCP again as iPXE (user class iPXE),
// then HTTP: the script its boot file URL names, and the kernel and initrd the script
// names. The storm runs against the boot server alone and against dnsmasq (DHCP and its
// own TFTP server) with nginx (a static script and the same files), alternately first
// over testkit.PairRounds rounds, and reports the median, minimum and maximum of the
// rounds' ratios of the time until the last machine has everything (the peer's time over
// ours: above 1 means the boot server finished first).
func BenchmarkBootStorm(b *testing.B) {
	netns.Require(b, "dnsmasq", "nginx")
	srvNS, cliNS, cfg := benchNet(b)
	newStorm(b, cfg, dnsmasqRange, netip.MustParseAddr("10.99.201.0")).bench(b, srvNS, cliNS, 0, "")
}

// BenchmarkBootStormRouted is the storm of BenchmarkBootStorm with the machines on a
// rack segment (10.98.0.0/16) behind a router namespace, whose ISC dhcrelay relays
// their DHCP to the server's segment (10.99.0.0/16): both servers answer from the
// rack's range, and the TFTP reads and downloads go through the router.
func BenchmarkBootStormRouted(b *testing.B) {
	netns.Require(b, "dnsmasq", "nginx", "dhcrelay")
	srvNS, router, cliNS, cfg := routedBenchNet(b)
	st := newStorm(b, cfg, dnsmasqRackRange, netip.MustParseAddr("10.98.201.0"))
	st.relay = router
	st.bench(b, srvNS, cliNS, 0, "routed-")
}

// BenchmarkBootStormWindow is the storm of BenchmarkBootStorm with firmware that asks
// for an RFC 7440 windowsize of 8 blocks for its TFTP read, as UEFI firmware asks for
// 4. dnsmasq (2.90) does not know the option and leaves it out of its OACK, so its
// machines read one block per acknowledgement. window-tftp-windowed and
// window-dnsmasq-tftp-windowed count, for each server, the machines whose read went
// windowed.
func BenchmarkBootStormWindow(b *testing.B) {
	netns.Require(b, "dnsmasq", "nginx")
	srvNS, cliNS, cfg := benchNet(b)
	newStorm(b, cfg, dnsmasqRange, netip.MustParseAddr("10.99.201.0")).bench(b, srvNS, cliNS, 8, "window-")
}

// storm is a storm's files and entries, ready to run against both servers.
type storm struct {
	cfg     Config
	clients int
	entries map[string]Entry
	// dhcpRange is dnsmasq's range arguments, for the segment the machines are on.
	dhcpRange []string
	// relay is the router namespace of a routed storm, whose UDP drops are logged.
	relay *netns.NS
	// machines is the first of the machines' addresses: machine i downloads from the
	// i-th address after it, as each machine has an address of its own once it has its
	// lease (bench adds them to the client's interface).
	machines netip.Addr
}

// machineAddr is the address machine i is leased and downloads from, the i-th after
// first.
func machineAddr(first netip.Addr, i int) netip.Addr {
	a := first.As4()
	return netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, binary.BigEndian.Uint32(a[:])+uint32(i))))
}

// stormAddrs is how many machines a storm has at most, each with an address of its own:
// from x.y.201.0 they stay within the segment's /16.
const stormAddrs = 14000

// addMachineAddrs adds the addresses of the storm's machines to the client's interface
// in ns. The namespace answers no ICMP echo: firmware holds no address before its DHCP,
// so both servers' checks of an address before they offer it (the boot server's
// conflictCheck, dnsmasq's ping) must find each machine's free, as they would on a rack.
func (st *storm) addMachineAddrs(b *testing.B, ns *netns.NS) {
	b.Helper()
	ns.Run(b, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/icmp_echo_ignore_all")
	var batch strings.Builder
	for i := range min(st.clients, stormAddrs) {
		fmt.Fprintf(&batch, "address add %s/16 dev %s\n", machineAddr(st.machines, i), clientIf)
	}
	file := filepath.Join(b.TempDir(), "addrs.batch")
	if err := os.WriteFile(file, []byte(batch.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	ns.Run(b, "ip", "-batch", file)
}

// newStorm writes the storm's files into cfg's directories (a script at cfg's server
// address for nginx to serve) and gives every machine a ramdisk entry.
func newStorm(b *testing.B, cfg Config, dhcpRange []string, machines netip.Addr) *storm {
	b.Helper()
	// The machines download from the addresses they are leased, as a machine's script goes
	// only to its own address: each asks for its own (option 50), and both servers lease
	// from a range of just those.
	last := machineAddr(machines, stormAddrs-1)
	if len(cfg.Subnets) > 0 {
		cfg.Subnets = slices.Clone(cfg.Subnets)
		cfg.Subnets[0].Range = Range{Start: machines, End: last}
	} else {
		cfg.Range = Range{Start: machines, End: last}
	}
	dhcpRange = append([]string{fmt.Sprintf("--dhcp-range=%s,%s,255.255.0.0,1h", machines, last)}, dhcpRange[1:]...)
	st := &storm{cfg: cfg, clients: stormClients(b), entries: map[string]Entry{}, dhcpRange: dhcpRange, machines: machines}
	dir := cfg.RamdiskDir
	for path, size := range map[string]int{
		filepath.Join(cfg.IPXEDir, "undionly.kpxe"): stormIPXESize,
		filepath.Join(dir, "vmlinuz"):               stormKernelSize,
		filepath.Join(dir, "initrd.img"):            stormInitrdSize,
	} {
		if err := randomFile(path, size); err != nil {
			b.Fatal(err)
		}
	}
	base := "http://" + serverAddr
	script := fmt.Sprintf("#!ipxe\nkernel %s/ramdisk/vmlinuz initrd=initrd console=ttyS0 || goto failed\ninitrd --name initrd %s/ramdisk/initrd.img || goto failed\nboot\n", base, base)
	if err := os.WriteFile(filepath.Join(dir, "boot.ipxe"), []byte(script), 0o644); err != nil {
		b.Fatal(err)
	}
	for i := range st.clients {
		st.entries[stormMAC(i).String()] = Entry{Kind: KindRamdisk,
			Ramdisk: Ramdisk{Kernel: "vmlinuz", Initrd: "initrd.img", Token: "rt_storm", Args: []string{"console=ttyS0"}}}
	}
	return st
}

// runOurs has the machines of cliNS boot against the boot server in srvNS, started with
// no leases, their firmware asking for a TFTP window of window blocks (none when 0).
func (st *storm) runOurs(b *testing.B, srvNS, cliNS *netns.NS, window int) pxeStormResult {
	b.Helper()
	cfg := st.cfg
	cfg.LeaseFile = filepath.Join(b.TempDir(), "leases.db")
	srv := startServer(b, srvNS, cfg, st.entries)
	defer srv.stop()
	drops := st.relayDrops(b)
	r := runPXEStorm(b, cliNS, "boot server", st.clients, window, st.machines)
	st.logRelayDrops(b, "boot server", drops)
	return r
}

// runPeer is runOurs against dnsmasq (DHCP, with no leases, and its TFTP) and nginx in
// srvNS.
func (st *storm) runPeer(b *testing.B, srvNS, cliNS *netns.NS, window int) pxeStormResult {
	b.Helper()
	base := "http://" + serverAddr
	stopDHCP := runDnsmasq(b, srvNS, serverIf, append(slices.Clone(st.dhcpRange), "--dhcp-userclass=set:ipxe,iPXE",
		"--dhcp-boot=tag:ipxe,"+base+"/ramdisk/boot.ipxe", "--dhcp-boot=tag:!ipxe,undionly.kpxe",
		"--enable-tftp", "--tftp-root="+st.cfg.IPXEDir, fmt.Sprintf("--tftp-max=%d", 2*st.clients))...)
	defer stopDHCP()
	stopHTTP := runNginx(b, srvNS, st.cfg.RamdiskDir)
	defer stopHTTP()
	time.Sleep(500 * time.Millisecond)
	drops := st.relayDrops(b)
	r := runPXEStorm(b, cliNS, "dnsmasq+nginx", st.clients, window, st.machines)
	st.logRelayDrops(b, "dnsmasq+nginx", drops)
	return r
}

// relayDrops is how many UDP datagrams the relay's namespace dropped so far for a full
// receive buffer (RcvbufErrors of its /proc/net/snmp); 0 without a relay.
func (st *storm) relayDrops(b *testing.B) int {
	b.Helper()
	if st.relay == nil {
		return 0
	}
	return snmpCounter(b, st.relay, "Udp", "RcvbufErrors")
}

// logRelayDrops logs the relay's drops since before, during the storm against peer.
func (st *storm) logRelayDrops(b *testing.B, peer string, before int) {
	b.Helper()
	if st.relay != nil {
		b.Logf("%s: the relay's namespace dropped %d UDP datagrams on full receive buffers", peer, st.relayDrops(b)-before)
	}
}

// bench runs the storm against both servers in testkit.PairRounds alternating rounds
// (window as runOurs has it), b.N times. It reports the median of the within-round
// ratios of the times until the last machine had everything (dnsmasq+nginx's over the
// boot server's, above 1: the boot server's last machine finished first) with their
// minimum and maximum, the names after prefix, the same of the times until half of them
// had (prefix+"p50-"), and logs each side's medians. With a window, it also reports how
// many reads each server agreed to a window for (medians of the rounds), and errs unless
// the boot server agreed for every machine.
func (st *storm) bench(b *testing.B, srvNS, cliNS *netns.NS, window int, prefix string) {
	st.addMachineAddrs(b, cliNS)
	rounds := testkit.PairRounds(b)
	for range b.N {
		var ours, peer []pxeStormResult
		var ourEchoes, peerEchoes []int
		p := testkit.RunPairs(rounds, testkit.PeerOverOurs, func() float64 {
			return countEchoes(b, srvNS, &ourEchoes, func() float64 {
				r := st.runOurs(b, srvNS, cliNS, window)
				ours = append(ours, r)
				return r.Last.Seconds()
			})
		}, func() float64 {
			return countEchoes(b, srvNS, &peerEchoes, func() float64 {
				r := st.runPeer(b, srvNS, cliNS, window)
				peer = append(peer, r)
				return r.Last.Seconds()
			})
		})
		b.Logf("ICMP echoes sent (address checks), round by round: boot server %v, dnsmasq %v", ourEchoes, peerEchoes)
		if err := sameChecks(ourEchoes, peerEchoes); err != nil {
			b.Error(err)
		}
		p.Report(b, prefix, "dnsmasq+nginx/boot server, time until the last machine had everything:", "boot server", "dnsmasq+nginx", "s")
		p50 := func(r pxeStormResult) float64 { return r.P50.Seconds() }
		testkit.PairsOf(figures(ours, p50), figures(peer, p50), testkit.PeerOverOurs).
			Report(b, prefix+"p50-", "dnsmasq+nginx/boot server, time until half the machines had everything:", "boot server", "dnsmasq+nginx", "s")
		if window == 0 {
			continue
		}
		windowed := func(r pxeStormResult) float64 { return float64(r.Windowed) }
		for _, r := range ours {
			if r.Windowed != r.Booted {
				b.Errorf("boot server: %d of %d TFTP reads went windowed, want all", r.Windowed, r.Booted)
			}
		}
		b.ReportMetric(testkit.Median(figures(ours, windowed)), prefix+"tftp-windowed")
		b.ReportMetric(testkit.Median(figures(peer, windowed)), prefix+"dnsmasq-tftp-windowed")
	}
}

// figures is f of each of the storms rs.
func figures(rs []pxeStormResult, f func(pxeStormResult) float64) []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return v
}

// routedBenchNet is benchNet's server segment (the server at 10.99.0.1/16) with a router
// namespace on it (10.99.0.254) forwarding to a rack segment, 10.98.0.0/16 (router
// 10.98.0.1), on which the client's namespace is 10.98.0.250 with its default route
// through the router; dhcrelay on the router relays the rack's DHCP to the server (the
// router's namespace is returned for its drop counters). The
// config serves the rack as a routed subnet leasing 51,200 addresses (a storm narrows
// the range to its machines' addresses).
func routedBenchNet(b *testing.B) (srvNS, router, cliNS *netns.NS, cfg Config) {
	b.Helper()
	lan, srvNS, cfg := benchServer(b)
	router = netns.New(b, "router")
	lan.Attach(b, router, "up0", "10.99.0.254/16", "")
	rack := netns.NewLAN(b)
	rack.Attach(b, router, "rack0", "10.98.0.1/16", "")
	router.Run(b, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	srvNS.Run(b, "ip", "route", "add", "10.98.0.0/16", "via", "10.99.0.254")
	cliNS = netns.New(b, "rackc")
	rack.Attach(b, cliNS, clientIf, "10.98.0.250/16", "")
	cliNS.Run(b, "ip", "route", "add", "default", "via", "10.98.0.1")
	cfg.Subnets = []Subnet{{Subnet: netip.MustParsePrefix("10.98.0.0/16"),
		Range:  Range{Start: netip.MustParseAddr("10.98.1.0"), End: netip.MustParseAddr("10.98.200.255")},
		Router: netip.MustParseAddr("10.98.0.1")}}
	startRelay(b, router, serverAddr, "up0", "rack0")
	return srvNS, router, cliNS, cfg
}

// dnsmasqRackRange is dnsmasqRange for routedBenchNet's rack segment: dnsmasq answers a
// relayed request from the range of its giaddr's subnet.
var dnsmasqRackRange = []string{"--dhcp-range=10.98.1.0,10.98.200.255,255.255.0.0,1h", "--dhcp-lease-max=100000", "--quiet-dhcp"}

// stormMAC is the hardware address of the storm's machine i.
func stormMAC(i int) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0xbb, 0, 0, byte(i >> 8), byte(i)}
}

// pxeStormSpec is what the storm helper runs.
type pxeStormSpec struct {
	Interface string
	Clients   int
	Timeout   time.Duration
	// Window is the TFTP windowsize (RFC 7440) the firmware asks for; none when 0.
	Window int
	// Machines is the first machine's address (machineAddr).
	Machines netip.Addr
}

// pxeStormResult is what a storm measured. Every time is since the storm's start.
type pxeStormResult struct {
	Booted, Failed int
	// Restarts is how many boots failed and started again; Errors holds the first
	// few reasons.
	Restarts int
	// Windowed is how many machines' TFTP reads the server agreed to a window for.
	Windowed int
	// Last is when the last machine had everything; P50 when half of them had.
	Last, P50 time.Duration
	// DHCP, TFTP and IPXE are when the last machine finished its firmware's DHCP, its
	// TFTP read and its iPXE DHCP.
	DHCP, TFTP, IPXE time.Duration
	// Timeline is, for each phase of a machine's boot, when a tenth, half and nine
	// tenths of the machines had finished it: the firmware's DHCP, its TFTP read, iPXE's
	// DHCP, the script, and the last download.
	Timeline map[string][3]time.Duration
	// TFTPRead is how long the machines' TFTP reads took, from the end of their
	// firmware's DHCP to the read's last block: a tenth, half and nine tenths of them
	// took at most so long.
	TFTPRead [3]time.Duration
	Bytes    int64
	Errors   []string
}

// stormPhases are the phases of a storm's Timeline, in the order a machine goes through them.
var stormPhases = []string{"dhcp", "tftp", "ipxe-dhcp", "script", "done"}

// runPXEStorm runs a storm from ns and fails the benchmark unless every machine booted.
func runPXEStorm(b *testing.B, ns *netns.NS, peer string, clients, window int, machines netip.Addr) pxeStormResult {
	b.Helper()
	cmd := helperCommand(b, ns, pxeStormHelper, pxeStormSpec{Interface: clientIf, Clients: clients, Timeout: 5 * time.Minute, Window: window, Machines: machines})
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var r pxeStormResult
	if err != nil || json.Unmarshal(out, &r) != nil {
		b.Fatalf("storm: %v\n%s%s", err, out, stderr.String())
	}
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	var timeline strings.Builder
	for _, ph := range stormPhases {
		t := r.Timeline[ph]
		fmt.Fprintf(&timeline, " %s %v/%v/%v", ph, ms(t[0]), ms(t[1]), ms(t[2]))
	}
	b.Logf("%s: %d booted, %d failed, %d restarts, %d TFTP reads windowed, last at %v (p50 %v; last DHCP %v, TFTP %v, iPXE DHCP %v), %d MiB %v; a tenth/half/nine tenths of the machines through:%s; TFTP reads took %v/%v/%v", peer,
		r.Booted, r.Failed, r.Restarts, r.Windowed, ms(r.Last), ms(r.P50), ms(r.DHCP), ms(r.TFTP), ms(r.IPXE), r.Bytes>>20, r.Errors, timeline.String(),
		ms(r.TFTPRead[0]), ms(r.TFTPRead[1]), ms(r.TFTPRead[2]))
	if r.Failed > 0 {
		b.Errorf("%s: %d of %d machines failed to boot: %v", peer, r.Failed, clients, r.Errors)
	}
	return r
}

// pxeStormMain runs a storm from the spec file and prints its result as JSON.
func pxeStormMain(specFile string) int {
	var spec pxeStormSpec
	err := readSpec(specFile, &spec)
	if err == nil {
		var r pxeStormResult
		r, err = pxeStorm(spec)
		json.NewEncoder(os.Stdout).Encode(r)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		return 1
	}
	return 0
}

// pxeStorm starts spec.Clients machines at once. What each machine's firmware and iPXE
// send over UDP (both DHCP exchanges and the TFTP read) runs in a child process of its
// own, and the HTTP downloads run here: a real machine's firmware has a processor of its
// own, and in one process the downloads of the machines already through would keep the
// scheduler so busy that a TFTP read waits up to seconds for each block's turn to be
// acknowledged (measured on the wire: a median of 27 ms from a block to its
// acknowledgement while no download runs, 0.8-1.1 s while they do), so the storm would
// measure the simulator rather than the server. The child shares one DHCP socket among
// the machines (replies, broadcast or not, are told apart by transaction id); each TFTP
// read has its own socket, as each machine's would; each machine downloads from an
// address of its own.
func pxeStorm(spec pxeStormSpec) (pxeStormResult, error) {
	udp, err := startStormUDP(spec)
	if err != nil {
		return pxeStormResult{}, err
	}
	defer udp.close()
	ctx, cancel := context.WithTimeout(context.Background(), spec.Timeout)
	defer cancel()

	var (
		mu    sync.Mutex
		res   pxeStormResult
		times []time.Duration
		// phases holds each phase's times, in stormPhases' order.
		phases = make([][]time.Duration, len(stormPhases))
		reads  []time.Duration
		wg     sync.WaitGroup
		start  = time.Now()
	)
	for i := range spec.Clients {
		wg.Go(func() {
			// A machine whose boot fails starts again from power-on, as a server set to
			// boot from the network does, until the storm's time is up.
			var (
				m   pxeMachine
				err error
			)
			local := &net.TCPAddr{IP: machineAddr(spec.Machines, i).AsSlice()}
			client := &http.Client{Timeout: spec.Timeout, Transport: &http.Transport{DisableKeepAlives: true,
				DialContext: (&net.Dialer{LocalAddr: local}).DialContext}}
			for {
				m = pxeMachine{}
				if err = m.boot(ctx, udp, client, i, start); err == nil || ctx.Err() != nil {
					break
				}
				mu.Lock()
				res.Restarts++
				if len(res.Errors) < 5 {
					res.Errors = append(res.Errors, err.Error())
				}
				mu.Unlock()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Failed++
				if len(res.Errors) < 5 {
					res.Errors = append(res.Errors, err.Error())
				}
				return
			}
			res.Booted++
			res.Bytes += m.bytes
			if m.window > 1 {
				res.Windowed++
			}
			res.DHCP, res.TFTP, res.IPXE = max(res.DHCP, m.dhcp), max(res.TFTP, m.tftp), max(res.IPXE, m.ipxe)
			times = append(times, m.done)
			for k, t := range []time.Duration{m.dhcp, m.tftp, m.ipxe, m.script, m.done} {
				phases[k] = append(phases[k], t)
			}
			reads = append(reads, m.tftp-m.dhcp)
		})
	}
	wg.Wait()
	slices.Sort(times)
	if len(times) > 0 {
		res.P50, res.Last = times[len(times)/2], times[len(times)-1]
	}
	res.Timeline = map[string][3]time.Duration{}
	for k, ts := range phases {
		if len(ts) > 0 {
			res.Timeline[stormPhases[k]] = deciles(ts)
		}
	}
	if len(reads) > 0 {
		res.TFTPRead = deciles(reads)
	}
	return res, nil
}

// deciles sorts ts (not empty) and returns its first decile, median and ninth decile.
func deciles(ts []time.Duration) [3]time.Duration {
	slices.Sort(ts)
	return [3]time.Duration{ts[len(ts)/10], ts[len(ts)/2], ts[len(ts)*9/10]}
}

// pxeMachine is one machine of a storm: when it finished each phase, and the bytes it
// read.
type pxeMachine struct {
	dhcp, tftp, ipxe, script, done time.Duration
	bytes                          int64
	// window is the TFTP window its server agreed to (1: one block per acknowledgement).
	window int
}

// boot is one machine's boot, from power-on to having its kernel and initrd: the UDP
// part by the storm's child process, then the HTTP part here.
func (m *pxeMachine) boot(ctx context.Context, udp *stormUDP, client *http.Client, i int, start time.Time) error {
	r, err := udp.firmware(ctx, i)
	if err != nil {
		return err
	}
	at := func(ns int64) time.Duration { return time.Unix(0, ns).Sub(start) }
	m.dhcp, m.tftp, m.ipxe, m.bytes, m.window = at(r.DHCP), at(r.TFTP), at(r.IPXE), r.Bytes, r.Window
	mac := stormMAC(i)
	get := func(url string, body func(io.Reader) error) error {
		r, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(r)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		cr := &countingReader{r: resp.Body}
		err = body(cr)
		m.bytes += cr.n
		return err
	}
	var kernel, initrd string
	err = get(r.Script, func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 {
				continue
			}
			for _, w := range f[1:] {
				if strings.HasPrefix(w, "http://") {
					switch f[0] {
					case "kernel":
						kernel = w
					case "initrd":
						initrd = w
					}
					break
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		return fmt.Errorf("%s: %w", mac, err)
	}
	m.script = time.Since(start)
	if kernel == "" || initrd == "" {
		return fmt.Errorf("%s: script %s names no kernel and initrd", mac, r.Script)
	}
	for _, u := range []string{kernel, initrd} {
		if err := get(u, discard); err != nil {
			return fmt.Errorf("%s: %w", mac, err)
		}
	}
	if want := int64(stormIPXESize + stormKernelSize + stormInitrdSize); m.bytes < want {
		return fmt.Errorf("%s: %d bytes, want at least %d", mac, m.bytes, want)
	}
	m.done = time.Since(start)
	return nil
}

// discard reads r to its end into 256 KiB buffers, as iPXE reads a download into memory:
// io.Discard would read 8 KiB at a time, and the storm's thousand downloads in one
// process would spend a good part of the client's processor time on system calls.
func discard(r io.Reader) error {
	buf := discardBufs.Get().(*[]byte)
	defer discardBufs.Put(buf)
	for {
		_, err := r.Read(*buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var discardBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// pxeStormUDPHelper is the helper name of the storm's child process, which does each
// machine's UDP part when asked.
const pxeStormUDPHelper = "pxestorm-udp"

// firmwareResult is the UDP part of one machine's boot, as the child reports it: the
// wall-clock times (Unix nanoseconds) it finished its firmware's DHCP, its TFTP read
// and its iPXE DHCP, the bytes it read by TFTP and the window they came in, and the
// URL iPXE was given.
type firmwareResult struct {
	I                int
	Err              string
	DHCP, TFTP, IPXE int64
	Bytes            int64
	Window           int
	Script           string
}

// stormUDP is the storm's child process: a request is a machine's number on a line of
// its standard input, an answer a firmwareResult on a line of its standard output.
type stormUDP struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	mu   sync.Mutex
	wait map[int]chan firmwareResult
}

func startStormUDP(spec pxeStormSpec) (*stormUDP, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+pxeStormUDPHelper)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	u := &stormUDP{cmd: cmd, in: in, wait: map[int]chan firmwareResult{}}
	if err := json.NewEncoder(in).Encode(spec); err != nil {
		u.close()
		return nil, err
	}
	go func() {
		dec := json.NewDecoder(out)
		for {
			var r firmwareResult
			if dec.Decode(&r) != nil {
				break
			}
			u.mu.Lock()
			ch := u.wait[r.I]
			delete(u.wait, r.I)
			u.mu.Unlock()
			if ch != nil {
				ch <- r
			}
		}
		// The child is gone: no answer will come.
		u.mu.Lock()
		for i, ch := range u.wait {
			ch <- firmwareResult{I: i, Err: "storm child exited"}
			delete(u.wait, i)
		}
		u.wait = nil
		u.mu.Unlock()
	}()
	return u, nil
}

// firmware has the child do machine i's UDP part and returns its result.
func (u *stormUDP) firmware(ctx context.Context, i int) (firmwareResult, error) {
	ch := make(chan firmwareResult, 1)
	u.mu.Lock()
	if u.wait == nil {
		u.mu.Unlock()
		return firmwareResult{}, errors.New("storm child exited")
	}
	u.wait[i] = ch
	_, err := fmt.Fprintf(u.in, "%d\n", i)
	u.mu.Unlock()
	if err != nil {
		return firmwareResult{}, err
	}
	select {
	case r := <-ch:
		if r.Err != "" {
			return r, errors.New(r.Err)
		}
		return r, nil
	case <-ctx.Done():
		return firmwareResult{}, ctx.Err()
	}
}

func (u *stormUDP) close() {
	u.in.Close()
	u.cmd.Wait()
}

// pxeStormUDPMain is the storm's child: it reads the spec from its standard input, then
// machine numbers, and does each one's UDP part at once.
func pxeStormUDPMain() int {
	in := bufio.NewReader(os.Stdin)
	var spec pxeStormSpec
	line, err := in.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &spec)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm child:", err)
		return 1
	}
	conn, err := server4.NewIPv4UDPConn(spec.Interface, &net.UDPAddr{Port: dhcpv4.ClientPort})
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm child:", err)
		return 1
	}
	defer conn.Close()
	// A thousand NICs each hold their own replies; the one socket standing in for them
	// must not drop the burst of broadcasts.
	if rc, err := conn.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 64<<20)
		})
	}
	mux := &dhcpMux{conn: conn, wait: map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4{}}
	go mux.run()
	var (
		mu  sync.Mutex
		enc = json.NewEncoder(os.Stdout)
		wg  sync.WaitGroup
	)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		i, err := strconv.Atoi(sc.Text())
		if err != nil {
			continue
		}
		wg.Go(func() {
			r := firmware(mux, stormMAC(i), machineAddr(spec.Machines, i), spec.Window)
			r.I = i
			mu.Lock()
			enc.Encode(r)
			mu.Unlock()
		})
	}
	wg.Wait()
	return 0
}

// firmware is a machine's UDP part: DHCP as BIOS PXE firmware, the TFTP read of the boot
// file it was given (asking for a window of window blocks unless 0), and DHCP again as
// iPXE.
func firmware(mux *dhcpMux, mac net.HardwareAddr, ip netip.Addr, window int) (r firmwareResult) {
	fail := func(err error) firmwareResult { r.Err = err.Error(); return r }
	pxe := []dhcpv4.Modifier{dhcpv4.WithHwAddr(mac), dhcpv4.WithBroadcast(true),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC))}
	ack, err := dora(mux, pxe, ip, firmwareWaits)
	if err != nil {
		return fail(fmt.Errorf("%s: firmware DHCP: %w", mac, err))
	}
	r.DHCP = time.Now().UnixNano()
	if ack.BootFileName != "undionly.kpxe" {
		return fail(fmt.Errorf("%s: firmware DHCP: boot file %q, want undionly.kpxe", mac, ack.BootFileName))
	}
	next := ack.ServerIPAddr
	if next == nil || next.IsUnspecified() {
		next = ack.ServerIdentifier()
	}
	addr := net.JoinHostPort(next.String(), "69")
	var n int64
	if window > 0 {
		n, r.Window, err = tftpReadWindow(addr, ip, ack.BootFileName, window)
	} else {
		n, err = tftpRead(addr, ip, ack.BootFileName)
		r.Window = 1
	}
	if err != nil {
		return fail(fmt.Errorf("%s: TFTP %s from %s: %w", mac, ack.BootFileName, next, err))
	}
	if n != stormIPXESize {
		return fail(fmt.Errorf("%s: TFTP %s: %d bytes, want %d", mac, ack.BootFileName, n, stormIPXESize))
	}
	r.Bytes = n
	r.TFTP = time.Now().UnixNano()
	ack, err = dora(mux, append(pxe, dhcpv4.WithUserClass("iPXE", false)), ip, ipxeWaits)
	if err != nil {
		return fail(fmt.Errorf("%s: iPXE DHCP: %w", mac, err))
	}
	r.IPXE = time.Now().UnixNano()
	r.Script = ack.BootFileName
	return r
}

// How long a machine waits for a reply before it sends again, and gives up after the
// last: PXE firmware as the PXE specification (2.1) has it, iPXE as its DHCP timer
// does (from 1 s, doubling, at most 10 s).
var (
	firmwareWaits = []time.Duration{4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second}
	ipxeWaits     = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second}
)

// dora is a DHCP exchange (DISCOVER asking for ip, OFFER, REQUEST, ACK) with the options
// of mods, each message sent again after each of waits without its reply.
func dora(mux *dhcpMux, mods []dhcpv4.Modifier, ip netip.Addr, waits []time.Duration) (*dhcpv4.DHCPv4, error) {
	disc, err := dhcpv4.New(append(mods, dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IP(ip.AsSlice()))))...)
	if err != nil {
		return nil, err
	}
	offer, err := mux.exchangeWaits(disc, dhcpv4.MessageTypeOffer, waits)
	if err != nil {
		return nil, err
	}
	req, err := dhcpv4.NewRequestFromOffer(offer, mods...)
	if err != nil {
		return nil, err
	}
	return mux.exchangeWaits(req, dhcpv4.MessageTypeAck, waits)
}

// exchangeWaits broadcasts req until a reply of type want comes, waiting each of waits
// in turn.
func (m *dhcpMux) exchangeWaits(req *dhcpv4.DHCPv4, want dhcpv4.MessageType, waits []time.Duration) (*dhcpv4.DHCPv4, error) {
	ch := make(chan *dhcpv4.DHCPv4, 4)
	m.mu.Lock()
	m.wait[req.TransactionID] = ch
	m.mu.Unlock()
	defer func() { m.mu.Lock(); delete(m.wait, req.TransactionID); m.mu.Unlock() }()
	to := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}
	for _, wait := range waits {
		if _, err := m.conn.WriteTo(req.ToBytes(), to); err != nil {
			return nil, err
		}
		// RFC 2131 section 4.1: each wait randomised by up to a second either way (half
		// a wait, for shorter ones), so that the machines do not resend in step.
		j := min(time.Second, wait/2)
		timer := time.NewTimer(wait - j + time.Duration(rand.Int64N(int64(2*j))))
		for waiting := true; waiting; {
			select {
			case r := <-ch:
				if r.MessageType() == want {
					timer.Stop()
					return r, nil
				}
			case <-timer.C:
				waiting = false
			}
		}
	}
	return nil, fmt.Errorf("no %s", want)
}

// tftpRead reads name from the TFTP server at addr as PXE firmware does (blksize 1468,
// tsize), from the machine's address local (the server bounds the reads of each
// address), and returns its length.
func tftpRead(addr string, local netip.Addr, name string) (int64, error) {
	c, err := tftp.NewClient(addr)
	if err != nil {
		return 0, err
	}
	if err := c.SetLocalAddr(local.String()); err != nil {
		return 0, err
	}
	c.SetBlockSize(1468)
	c.RequestTSize(true)
	c.SetTimeout(2 * time.Second)
	c.SetRetries(5)
	wt, err := c.Receive(name, "octet")
	if err != nil {
		return 0, err
	}
	return wt.WriteTo(io.Discard)
}

// tftpReadWindow reads name from the TFTP server at addr as firmware that knows RFC 7440
// does: it asks for blksize 1468, tsize and a windowsize of window blocks, acknowledges
// the last block of each window (or of the file), and at a gap or at the start of a
// window sent again, the last block it holds in order (once for the rest of that
// window); after 2 s without a datagram it
// sends its last acknowledgement again, five times at most. It returns the file's
// length and the window the server agreed to (1 when its OACK leaves the option out).
// It reads from the machine's address local, as tftpRead does.
func tftpReadWindow(addr string, local netip.Addr, name string, window int) (n int64, agreed int, err error) {
	to, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return 0, 0, err
	}
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	req := binary.BigEndian.AppendUint16(nil, 1) // RRQ
	for _, f := range []string{name, "octet", "blksize", "1468", "tsize", "0", "windowsize", strconv.Itoa(window)} {
		req = append(append(req, f...), 0)
	}
	ack := func(block uint16) []byte { return binary.BigEndian.AppendUint16([]byte{0, 4}, block) }
	var (
		peer     *net.UDPAddr // the server's transfer address, once it answered
		last     = req        // what to send again after a timeout
		blksize  = 512
		expected = uint16(1)
		inWindow int
		gapAck   time.Time // when a gap or a window sent again was last acknowledged
		buf      = make([]byte, 65536)
	)
	agreed = 1
	send := func(b []byte) error {
		last = b
		dst := peer
		if dst == nil {
			dst = to
		}
		_, err := conn.WriteToUDP(b, dst)
		return err
	}
	if err := send(req); err != nil {
		return 0, 0, err
	}
	for tries := 0; ; {
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		k, from, err := conn.ReadFromUDP(buf)
		if err != nil {
			if tries++; tries > 5 {
				return n, agreed, fmt.Errorf("nothing from the server in %d waits (block %d): %w", tries, expected, err)
			}
			if err := send(last); err != nil {
				return n, agreed, err
			}
			continue
		}
		if k < 4 || peer != nil && from.String() != peer.String() {
			continue
		}
		tries = 0
		op, arg, body := binary.BigEndian.Uint16(buf), binary.BigEndian.Uint16(buf[2:]), buf[4:k]
		switch {
		case op == 5: // ERROR
			return n, agreed, fmt.Errorf("error %d: %s", arg, bytes.TrimRight(body, "\x00"))
		case op == 6 && expected == 1: // OACK, or the same again when its acknowledgement was lost
			if peer == nil {
				peer = from
				f := bytes.Split(bytes.TrimSuffix(buf[2:k], []byte{0}), []byte{0})
				for i := 0; i+1 < len(f); i += 2 {
					v, _ := strconv.Atoi(string(f[i+1]))
					switch strings.ToLower(string(f[i])) {
					case "blksize":
						blksize = v
					case "windowsize":
						agreed = v
					}
				}
			}
			if err := send(ack(0)); err != nil {
				return n, agreed, err
			}
		case op == 3 && arg == expected: // DATA, the next block
			peer = from
			n += int64(len(body))
			expected++
			inWindow++
			if len(body) < blksize || inWindow == agreed {
				inWindow = 0
				if err := send(ack(expected - 1)); err != nil {
					return n, agreed, err
				}
			}
			if len(body) < blksize {
				return n, agreed, nil
			}
		case op == 3 && peer != nil && time.Since(gapAck) > 200*time.Millisecond:
			// A gap, or a window sent again from a block already held (its
			// acknowledgement was lost): the server starts again after the last block
			// held in order. The rest of the same window is not acknowledged again.
			gapAck, inWindow = time.Now(), 0
			if err := send(ack(expected - 1)); err != nil {
				return n, agreed, err
			}
		}
	}
}

// runNginx serves dir at /ramdisk/ on serverAddr:80 inside ns with nginx, and returns a
// function that stops it (the benchmark's end calls it too).
func runNginx(b *testing.B, ns *netns.NS, dir string) (stop func()) {
	b.Helper()
	prefix := b.TempDir()
	conf := fmt.Sprintf(`daemon off;
user root;
worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 4096; }
http {
	access_log off;
	sendfile on;
	default_type application/octet-stream;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	server {
		listen %[2]s:80;
		location /ramdisk/ { alias %[3]s/; }
	}
}
`, prefix, serverAddr, dir)
	confFile := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := ns.Command(context.Background(), "nginx", "-p", prefix, "-c", confFile)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop = sync.OnceFunc(func() {
		cmd.Process.Signal(syscall.SIGTERM) // the master stops its workers
		cmd.Wait()
	})
	b.Cleanup(stop)
	return stop
}
