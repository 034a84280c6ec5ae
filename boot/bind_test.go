package boot

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/testkit"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// The machines of the binding tests: acme's, whose scripts hold secrets, and one without
// an entry. Each asks from its own loopback address; the stranger from another.
const (
	acmeRamdisk = "52:54:00:00:00:01" // iPXE ramdisk with an extra initrd from the cache
	acmeSanboot = "52:54:00:00:00:02" // iPXE sanboot of a cached ISO
	acmeGRUB    = "52:54:00:00:00:03" // the signed chain's ramdisk, by TFTP
	unknownMAC  = "52:54:00:00:00:09"
	victimAddr  = "127.0.0.2"
	movedAddr   = "127.0.0.4"
	strangeAddr = "127.0.0.3"
)

// secrets are what no one but the machine may read in its script.
var secrets = []string{"bc.token=", "rt_acme", "cap=", "sanboot", "sha256"}

// bindSite is a whole boot server running on loopback (Run: DHCP on lo, TFTP and HTTP
// at 127.0.0.1) with acme's machines.
type bindSite struct {
	s                *Server
	clock            *clock.Fake
	http, tftp, dhcp int
}

func startBindSite(t *testing.T, mode Mode) bindSite {
	t.Helper()
	return startBindSiteLog(t, mode, slog.New(slog.DiscardHandler))
}

// startBindSiteLog is startBindSite logging to log.
func startBindSiteLog(t *testing.T, mode Mode, log *slog.Logger) bindSite {
	t.Helper()
	cfg := testConfig(t)
	cfg.Interface, cfg.Mode, cfg.ServerIP = "lo", mode, netip.MustParseAddr("127.0.0.1")
	cfg.DHCPPort, cfg.ProxyPort = testkit.FreePort(t, "udp"), testkit.FreePort(t, "udp")
	cfg.TFTPPort, cfg.HTTPPort = testkit.FreePort(t, "udp"), testkit.FreePort(t, "tcp")
	if mode == Authoritative {
		cfg.Subnet = netip.MustParsePrefix("127.0.0.0/24")
		cfg.Range = Range{Start: netip.MustParseAddr("127.0.0.2"), End: netip.MustParseAddr("127.0.0.20")}
		cfg.LeaseFile = filepath.Join(t.TempDir(), "leases.db")
		cfg.LeaseTime = Duration(time.Minute)
	}
	ramdisk := Ramdisk{Kernel: "vmlinuz", Initrd: "vmlinuz", Token: "rt_acme", Registry: "https://registry:7443"}
	withExtra := ramdisk
	withExtra.Extras = []string{"http://127.0.0.1:8080/images/sha256/ab?cap=acmecap"}
	c := clock.NewFake(time.Unix(1e9, 0))
	s, err := New(cfg, Deps{Entries: entries{
		acmeRamdisk: {Kind: KindRamdisk, Ramdisk: withExtra},
		acmeSanboot: {Kind: KindSanboot, ISO: "http://127.0.0.1:8080/images/sha256/cd?cap=acmecap"},
		acmeGRUB:    {Kind: KindRamdisk, SecureBoot: true, Ramdisk: ramdisk},
	}, Clock: c, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		s.Close()
	})
	b := bindSite{s: s, clock: c, http: cfg.HTTPPort, tftp: cfg.TFTPPort, dhcp: cfg.DHCPPort}
	testkit.WaitFor(t, "the boot server's HTTP listener", 10*time.Second, 10*time.Millisecond, func() bool {
		c, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(b.http))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return b
}

// request is a network-boot client's DHCPREQUEST for ip, naming server (option 54).
func request(t testing.TB, mac, ip, server string) *dhcpv4.DHCPv4 {
	t.Helper()
	hw, _ := net.ParseMAC(mac)
	req, err := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithHwAddr(hw),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP(ip))),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP(server))),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:003016")),
		dhcpv4.WithOption(dhcpv4.OptUserClass("iPXE")))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// httptestAddr is the client address of httptest's requests: unit tests bind their
// machines to it.
const httptestAddr = "192.0.2.1"

// learn has the proxy-mode server s hear each MAC's DHCPREQUEST for httptestAddr (to
// another server), so that their scripts go to httptestAddr.
func learn(t testing.TB, s *Server, macs ...string) {
	t.Helper()
	for _, mac := range macs {
		s.DHCPHandler()(request(t, mac, httptestAddr, "192.0.2.254"))
	}
}

// lease has the authoritative server acknowledge ip for mac, as mac's renewal from ip
// (ciaddr), which the server trusts when ip is free: it moves mac's lease there.
func (b bindSite) lease(t *testing.T, mac, ip string) {
	t.Helper()
	hw, _ := net.ParseMAC(mac)
	req, err := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithHwAddr(hw), dhcpv4.WithClientIP(net.ParseIP(ip)),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:003016")),
		dhcpv4.WithOption(dhcpv4.OptUserClass("iPXE")))
	if err != nil {
		t.Fatal(err)
	}
	resp, ok := b.s.DHCPHandler()(req)
	if !ok || resp.MessageType() != dhcpv4.MessageTypeAck || resp.YourIPAddr.String() != ip {
		t.Fatalf("DHCPREQUEST of %s for %s: %v", mac, ip, resp)
	}
}

// script is mac's iPXE script as the HTTP listener answers it to a client at from.
func (b bindSite) script(t *testing.T, mac, from string) string {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c := http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	defer c.CloseIdleConnections() // a client of its own each time: it keeps none open
	resp, err := c.Get("http://127.0.0.1:" + strconv.Itoa(b.http) + "/boot/" + strings.ReplaceAll(mac, ":", "-") + ".ipxe")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("script of %s from %s: %s\n%s", mac, from, resp.Status, body)
	}
	return string(body)
}

// grub is mac's GRUB configuration as the TFTP server sends it to a client at from.
func (b bindSite) grub(t *testing.T, mac, from string) string {
	t.Helper()
	out, err := exec.Command("curl", "-sS", "--interface", from, "tftp://127.0.0.1:"+strconv.Itoa(b.tftp)+"/boot/"+mac+".grub").CombinedOutput()
	if err != nil {
		t.Fatalf("TFTP of boot/%s.grub from %s: %v\n%s", mac, from, err, out)
	}
	return string(out)
}

// withheld fails unless body, mac's script as a stranger got it, holds none of acme's
// secrets and is word for word what a machine without an entry gets there.
func withheld(t *testing.T, body, mac, unknown string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(body, s) {
			t.Errorf("the script of %s holds %q:\n%s", mac, s, body)
		}
	}
	if anon(body, mac) != anon(unknown, unknownMAC) {
		t.Errorf("the script of %s differs from a machine's without an entry:\n%s\nwant:\n%s", mac, body, unknown)
	}
}

// anon is a script with mac, in either spelling, replaced by "MAC".
func anon(body, mac string) string {
	return strings.ReplaceAll(strings.ReplaceAll(body, mac, "MAC"), strings.ReplaceAll(mac, ":", "-"), "MAC")
}

// TestScriptOnlyToTheLeasedAddress: in authoritative mode a machine's script, with its
// ramdisk token and cache capabilities, goes only to the address leased to its MAC. A
// stranger that names the MAC from another address, by HTTP or TFTP, gets what a machine
// without an entry gets there; so does the machine's old address once its lease expired
// or moved, until its next DHCP.
func TestScriptOnlyToTheLeasedAddress(t *testing.T) {
	b := startBindSite(t, Authoritative)
	b.lease(t, acmeRamdisk, victimAddr)
	b.lease(t, acmeSanboot, "127.0.0.5")
	b.lease(t, acmeGRUB, "127.0.0.6")

	unknown := b.script(t, unknownMAC, strangeAddr)
	for _, mac := range []string{acmeRamdisk, acmeSanboot, acmeGRUB} {
		withheld(t, b.script(t, mac, strangeAddr), mac, unknown)
	}
	if !strings.Contains(unknown, "\ndhcp netX ") {
		t.Errorf("a stranger's script does not ask DHCP again:\n%s", unknown)
	}
	if got := b.grub(t, acmeGRUB, strangeAddr); strings.Contains(got, "rt_acme") || !strings.HasPrefix(got, "# better-compute: wait for "+acmeGRUB+"\n") {
		t.Errorf("a stranger's boot/%s.grub:\n%s", acmeGRUB, got)
	}

	if got := b.script(t, acmeRamdisk, victimAddr); !strings.Contains(got, " bc.token=rt_acme ") || !strings.Contains(got, "cap=acmecap") {
		t.Errorf("the machine's own script from its leased address:\n%s", got)
	}
	if got := b.script(t, acmeSanboot, "127.0.0.5"); !strings.Contains(got, "sanboot --no-describe http://127.0.0.1:8080/images/sha256/cd?cap=acmecap") {
		t.Errorf("the sanboot machine's own script:\n%s", got)
	}
	if got := b.grub(t, acmeGRUB, "127.0.0.6"); !strings.Contains(got, " bc.token=rt_acme") {
		t.Errorf("the signed chain's machine's own boot/%s.grub:\n%s", acmeGRUB, got)
	}

	// The lease moves to another address: the old one gets nothing more.
	b.lease(t, acmeRamdisk, movedAddr)
	withheld(t, b.script(t, acmeRamdisk, victimAddr), acmeRamdisk, b.script(t, unknownMAC, victimAddr))
	if got := b.script(t, acmeRamdisk, movedAddr); !strings.Contains(got, "bc.token=rt_acme") {
		t.Errorf("the script from the address the lease moved to:\n%s", got)
	}
	// The lease expires; the machine's next DHCP binds it again.
	b.clock.Advance(2 * time.Minute)
	withheld(t, b.script(t, acmeRamdisk, movedAddr), acmeRamdisk, b.script(t, unknownMAC, movedAddr))
	b.lease(t, acmeRamdisk, movedAddr)
	if got := b.script(t, acmeRamdisk, movedAddr); !strings.Contains(got, "bc.token=rt_acme") {
		t.Errorf("the script after the machine's next DHCP:\n%s", got)
	}
}

// TestScriptOnlyToTheRequestedAddressInProxyMode: in proxy mode, where another server
// leases, a machine's script goes only to the address its own last DHCPREQUEST carried
// (to the other server, which the proxy hears too), for at most learnedLife.
func TestScriptOnlyToTheRequestedAddressInProxyMode(t *testing.T) {
	b := startBindSite(t, Proxy)
	if _, ok := b.s.DHCPHandler()(request(t, acmeRamdisk, victimAddr, "127.0.0.9")); ok {
		t.Fatal("the proxy answered a DHCPREQUEST naming another server")
	}
	unknown := b.script(t, unknownMAC, strangeAddr)
	withheld(t, b.script(t, acmeRamdisk, strangeAddr), acmeRamdisk, unknown)
	withheld(t, b.script(t, acmeSanboot, strangeAddr), acmeSanboot, unknown)
	if got := b.script(t, acmeRamdisk, victimAddr); !strings.Contains(got, "bc.token=rt_acme") {
		t.Errorf("the machine's script from the address its DHCPREQUEST carried:\n%s", got)
	}
	b.clock.Advance(learnedLife + time.Second)
	withheld(t, b.script(t, acmeRamdisk, victimAddr), acmeRamdisk, b.script(t, unknownMAC, victimAddr))
}

// TestProxyRemembersBoundedAddresses is a host sending, in proxy mode, DHCPREQUESTs under
// ever new MACs: each MAC's address was remembered for learnedLife, about 120 bytes
// apiece, so that a host sending them as fast as the server answers grew the site's
// memory by gigabytes an hour. Now at most maxLearned are remembered, and a machine's
// DHCPREQUEST after the flood still binds its script to its address.
func TestProxyRemembersBoundedAddresses(t *testing.T) {
	b := startBindSite(t, Proxy)
	handle := b.s.DHCPHandler()
	for i := range 3 * maxLearned {
		mac := net.HardwareAddr{0x02, 0xbc, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}
		handle(request(t, mac.String(), netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String(), "192.0.2.254"))
	}
	b.s.learned.mu.Lock()
	n := len(b.s.learned.addrs)
	b.s.learned.mu.Unlock()
	if n > maxLearned {
		t.Errorf("%d addresses remembered after DHCPREQUESTs under %d MACs, want at most %d", n, 3*maxLearned, maxLearned)
	}
	handle(request(t, acmeRamdisk, victimAddr, "192.0.2.254"))
	if got := b.script(t, acmeRamdisk, victimAddr); !strings.Contains(got, "bc.token=rt_acme") {
		t.Errorf("the machine's script from the address its DHCPREQUEST carried after the flood:\n%s", got)
	}
}

// TestScriptFloodLogsBoundedLines is a stranger asking for scripts as fast as it can: a
// machine's under its MAC from the stranger's own address, and its own (it holds a lease
// of its own, under a MAC without an entry). Each request wrote a line, or two, to the
// site's log, so a flood filled the disk as fast as the host could send. Now each kind
// of answer, the wait to an address that does not hold the MAC and the wait to a
// machine without an entry, is logged at most once a minute, with how many it stands for.
func TestScriptFloodLogsBoundedLines(t *testing.T) {
	var log testkit.SyncBuffer
	b := startBindSiteLog(t, Authoritative, slog.New(slog.NewTextHandler(&log, nil)))
	b.lease(t, acmeRamdisk, victimAddr)
	b.lease(t, unknownMAC, strangeAddr)
	const flood = 500
	for range flood {
		b.script(t, acmeRamdisk, strangeAddr)
		b.script(t, unknownMAC, strangeAddr)
	}
	if n := strings.Count(log.String(), "boot script asked for"); n != 1 || !strings.Contains(log.String(), "requests=1\n") {
		t.Errorf("%d lines for %d requests from an address that does not hold the MAC within a minute, want 1:\n%.2000s", n, flood, log.String())
	}
	if n := strings.Count(log.String(), "ipxe script"); n != 1 {
		t.Errorf("%d lines for %d waits within a minute, want 1:\n%.2000s", n, 2*flood, log.String())
	}
	b.clock.Advance(time.Minute)
	b.lease(t, acmeRamdisk, victimAddr) // the leases outlive the minute
	b.lease(t, unknownMAC, strangeAddr)
	b.script(t, acmeRamdisk, strangeAddr)
	if !strings.Contains(log.String(), fmt.Sprintf("requests=%d\n", flood)) {
		t.Errorf("no warn a minute later standing for the %d requests held back and its own:\n%.2000s", flood, log.String())
	}
}

// TestReleaseFromAnotherAddressIsIgnored is a host on the segment that saw a machine's
// MAC and address in its broadcasts, and sends a DHCPRELEASE in the machine's name from
// its own address, then one as if relayed: before, the server ended the machine's lease,
// and the machine, still using its address, was withheld its script (and its address
// offered to others). A client releases from the address it gives up, never through a
// relay: the host's releases are dropped, and the machine's own release ends its lease.
func TestReleaseFromAnotherAddressIsIgnored(t *testing.T) {
	b := startBindSite(t, Authoritative)
	b.lease(t, acmeRamdisk, victimAddr)
	release := func(from string, giaddr net.IP) {
		t.Helper()
		hw, _ := net.ParseMAC(acmeRamdisk)
		r, err := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease), dhcpv4.WithHwAddr(hw), dhcpv4.WithClientIP(net.ParseIP(victimAddr)),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP("127.0.0.1"))), dhcpv4.WithGatewayIP(giaddr))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(from)})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.WriteToUDP(r.ToBytes(), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: b.dhcp}); err != nil {
			t.Fatal(err)
		}
	}
	release(strangeAddr, nil)
	release(strangeAddr, net.ParseIP(victimAddr))
	time.Sleep(500 * time.Millisecond)
	if got := b.script(t, acmeRamdisk, victimAddr); !strings.Contains(got, "rt_acme") {
		t.Fatalf("the machine is withheld its script after another host's releases:\n%s", got)
	}
	release(victimAddr, nil)
	testkit.WaitFor(t, "the machine's own release", 5*time.Second, 50*time.Millisecond, func() bool {
		return !strings.Contains(b.script(t, acmeRamdisk, victimAddr), "rt_acme")
	})
}
