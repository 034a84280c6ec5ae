package boot

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// entries is a fixed map of boot entries by MAC.
type entries map[string]Entry

func (e entries) Entry(mac net.HardwareAddr) (Entry, bool) {
	en, ok := e[mac.String()]
	return en, ok
}

func (e entries) Has(mac net.HardwareAddr) bool {
	_, ok := e[mac.String()]
	return ok
}

// sink collects discoveries.
type sink struct {
	mu  sync.Mutex
	got []Discovery
}

func (s *sink) Discovered(d Discovery) { s.mu.Lock(); defer s.mu.Unlock(); s.got = append(s.got, d) }

// testConfig is a valid proxy-mode config over fresh directories.
func testConfig(t testing.TB) Config {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"ipxe", "ramdisk"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "ipxe", "snponly.efi"), []byte("efi"), 0o644)
	os.WriteFile(filepath.Join(dir, "ramdisk", "vmlinuz"), []byte("0123456789"), 0o644)
	os.WriteFile(filepath.Join(dir, "secret"), []byte("secret"), 0o644)
	return Config{Interface: "bc0", Mode: Proxy, ServerIP: netip.MustParseAddr("10.9.0.1"),
		IPXEDir: filepath.Join(dir, "ipxe"), RamdiskDir: filepath.Join(dir, "ramdisk")}
}

// authoritativeConfig is testConfig in authoritative mode on 10.9.0.0/24, leasing
// 10.9.0.100 to end.
func authoritativeConfig(t testing.TB, end string) Config {
	t.Helper()
	cfg := testConfig(t)
	cfg.Mode = Authoritative
	cfg.Subnet = netip.MustParsePrefix("10.9.0.0/24")
	cfg.Range = Range{Start: netip.MustParseAddr("10.9.0.100"), End: netip.MustParseAddr(end)}
	cfg.LeaseFile = filepath.Join(t.TempDir(), "leases.db")
	return cfg
}

func TestConfigCheck(t *testing.T) {
	auth := func(c *Config) {
		c.Mode = Authoritative
		c.Subnet = netip.MustParsePrefix("10.9.0.0/24")
		c.Range = Range{Start: netip.MustParseAddr("10.9.0.100"), End: netip.MustParseAddr("10.9.0.200")}
		c.LeaseFile = "/tmp/leases.db"
	}
	cases := map[string]struct {
		edit  func(*Config)
		paths []string
	}{
		"proxy":         {edit: func(c *Config) {}},
		"authoritative": {edit: auth},
		"empty": {edit: func(c *Config) { *c = Config{IPXEDir: "/nonexistent"} },
			paths: []string{"boot.interface", "boot.serverIP", "boot.mode", "boot.ipxeDir", "boot.ramdiskDir"}},
		"authoritative without a range": {edit: func(c *Config) { c.Mode = Authoritative },
			paths: []string{"boot.subnet", "boot.range.start", "boot.range.end", "boot.leaseFile"}},
		"range outside the subnet": {edit: func(c *Config) {
			auth(c)
			c.Range.End = netip.MustParseAddr("10.9.1.1")
			c.Router = netip.MustParseAddr("10.8.0.1")
		}, paths: []string{"boot.range.end", "boot.router"}},
		// The subnet's broadcast address can not be checked (the kernel refuses an echo
		// to it: EACCES), so the client offered it was never answered; nor can a
		// machine use it, or the network's own address.
		"range with the subnet's broadcast address": {edit: func(c *Config) {
			auth(c)
			c.Range.End = netip.MustParseAddr("10.9.0.255")
			c.Subnets = []Subnet{{Subnet: netip.MustParsePrefix("10.8.0.0/24"), Range: Range{Start: netip.MustParseAddr("10.8.0.0"), End: netip.MustParseAddr("10.8.0.20")},
				LeaseTime: Duration(time.Hour)}}
		}, paths: []string{"boot.range.end", "boot.subnets[0].range.start"}},
		"range of a /31 holds both addresses": {edit: func(c *Config) {
			auth(c)
			c.Subnets = []Subnet{{Subnet: netip.MustParsePrefix("10.8.0.0/31"), Range: Range{Start: netip.MustParseAddr("10.8.0.0"), End: netip.MustParseAddr("10.8.0.1")},
				LeaseTime: Duration(time.Hour)}}
		}},
		"range backwards": {edit: func(c *Config) {
			auth(c)
			c.Range.Start, c.Range.End = c.Range.End, c.Range.Start
		}, paths: []string{"boot.range.end"}},
		"IPv6 DNS":                     {edit: func(c *Config) { auth(c); c.DNS = []netip.Addr{netip.MustParseAddr("::1")} }, paths: []string{"boot.dns[0]"}},
		"binary outside the directory": {edit: func(c *Config) { c.UEFIBinary = "../ipxe.efi" }, paths: []string{"boot.uefiBinary"}},
		"bad numbers": {edit: func(c *Config) {
			c.HTTPPort, c.TFTPBlockSize, c.TFTPWindowSize, c.HTTPSendBuffer, c.RetryInterval = 70000, 100, 65, 100, Duration(time.Millisecond)
		}, paths: []string{"boot.httpPort", "boot.tftpBlockSize", "boot.tftpWindowSize", "boot.httpSendBuffer", "boot.retryInterval"}},
		"autotuned send buffer": {edit: func(c *Config) { c.HTTPSendBuffer = -1 }},
		"no bound on downloads": {edit: func(c *Config) { c.HTTPDownloads = -1 }},
		"bad download gate": {edit: func(c *Config) { c.HTTPDownloads, c.HTTPDownloadWait = 0x20000, Duration(time.Millisecond) },
			paths: []string{"boot.httpDownloads", "boot.httpDownloadWait"}},
		"proxy port is the DHCP port": {edit: func(c *Config) { c.ProxyPort = 67 }, paths: []string{"boot.proxyPort"}},
		"short HTTP timeouts": {edit: func(c *Config) {
			c.HTTPIdleTimeout, c.HTTPStallTimeout = Duration(time.Millisecond), Duration(-time.Second)
		}, paths: []string{"boot.httpIdleTimeout", "boot.httpStallTimeout"}},
		"routed subnets": {edit: func(c *Config) {
			auth(c)
			c.Subnets = []Subnet{{Subnet: netip.MustParsePrefix("10.8.0.0/24"), Range: Range{Start: netip.MustParseAddr("10.8.0.10"), End: netip.MustParseAddr("10.8.0.20")},
				Router: netip.MustParseAddr("10.8.0.1"), LeaseTime: Duration(time.Hour)}}
		}},
		"routed subnets only": {edit: func(c *Config) {
			c.Mode, c.LeaseFile = Authoritative, "/tmp/leases.db"
			c.Subnets = []Subnet{{Subnet: netip.MustParsePrefix("10.8.0.0/24"), Range: Range{Start: netip.MustParseAddr("10.8.0.10"), End: netip.MustParseAddr("10.8.0.20")}}}
		}},
		"local router without a local subnet": {edit: func(c *Config) {
			c.Mode, c.LeaseFile, c.Router = Authoritative, "/tmp/leases.db", netip.MustParseAddr("10.9.0.254")
			c.Subnets = []Subnet{{Subnet: netip.MustParsePrefix("10.8.0.0/24"), Range: Range{Start: netip.MustParseAddr("10.8.0.10"), End: netip.MustParseAddr("10.8.0.20")}}}
		}, paths: []string{"boot.subnet", "boot.range.start", "boot.range.end"}},
		"bad routed subnets": {edit: func(c *Config) {
			auth(c)
			c.Subnets = []Subnet{
				{Subnet: netip.MustParsePrefix("10.9.0.128/25"), Range: Range{Start: netip.MustParseAddr("10.9.0.130"), End: netip.MustParseAddr("10.9.0.140")}},
				{Subnet: netip.MustParsePrefix("10.8.0.0/24"), Range: Range{Start: netip.MustParseAddr("10.8.0.10")}, Router: netip.MustParseAddr("10.7.0.1"),
					DNS: []netip.Addr{netip.MustParseAddr("::1")}, LeaseTime: Duration(time.Second)},
			}
		}, paths: []string{"boot.subnets[0].subnet", "boot.subnets[1].range.end", "boot.subnets[1].router", "boot.subnets[1].dns[0]", "boot.subnets[1].leaseTime"}},
		"whole range for machines without an entry": {edit: func(c *Config) { auth(c); c.UnknownShare = 1 }},
		"bad share for machines without an entry": {edit: func(c *Config) {
			auth(c)
			c.UnknownShare, c.UnknownLeaseTime = -0.5, Duration(time.Second)
		}, paths: []string{"boot.unknownShare", "boot.unknownLeaseTime"}},
		"share beyond the range": {edit: func(c *Config) { auth(c); c.UnknownShare = 1.5 }, paths: []string{"boot.unknownShare"}},
		"no conflict check":      {edit: func(c *Config) { auth(c); c.ConflictCheck = new(false) }},
		"conflict check's wait under 10ms": {edit: func(c *Config) { auth(c); c.ConflictCheckTimeout = Duration(time.Millisecond) },
			paths: []string{"boot.conflictCheckTimeout"}},
		"held-away share beyond the range":    {edit: func(c *Config) { auth(c); c.HeldAwayShare = 1.5 }, paths: []string{"boot.heldAwayShare"}},
		"no bound on the addresses held away": {edit: func(c *Config) { auth(c); c.HeldAwayShare = 1 }},
		"conflict check's wait over 1s": {edit: func(c *Config) { auth(c); c.ConflictCheckTimeout = Duration(3 * time.Second) },
			paths: []string{"boot.conflictCheckTimeout"}},
		"missing directory": {edit: func(c *Config) { c.RamdiskDir = "/nonexistent" }, paths: []string{"boot.ramdiskDir"}},
		"relative signed chain": {edit: func(c *Config) { c.ShimFile, c.GRUBFile = "shimx64.efi", "../grubx64.efi" },
			paths: []string{"boot.shimFile", "boot.grubFile"}},
		"missing signed chain": {edit: func(c *Config) { c.ShimFile = "/nonexistent/shimx64.efi" }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := testConfig(t)
			tc.edit(&c)
			err := c.Check()
			var paths []string
			if err != nil {
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					if proto.CodeOf(e) != proto.InvalidConfig {
						t.Errorf("%v: want INVALID_CONFIG", e)
					}
					paths = append(paths, proto.AsError(e).Details.Path)
				}
			}
			if diff := cmp.Diff(tc.paths, paths); diff != "" {
				t.Errorf("paths (-want +got):\n%s\n%v", diff, err)
			}
		})
	}
}

func newServer(t *testing.T, e Entries, d Discoveries, clock Clock) *Server {
	t.Helper()
	s, err := New(testConfig(t), Deps{Entries: e, Discoveries: d, Clock: clock, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestHTTP(t *testing.T) {
	e := entries{
		"52:54:00:00:00:01": {Kind: KindRamdisk, Ramdisk: Ramdisk{Kernel: "vmlinuz", Initrd: "http://cache/initrd.img", Token: "rt_1",
			Registry: "https://registry:7443", Pins: []string{"sha256/a=", "sha256/b="}, Args: []string{"console=ttyS0"}}},
		"52:54:00:00:00:02": {Kind: KindDisk},
		"52:54:00:00:00:03": {Kind: KindSanboot, ISO: "http://10.9.0.1:8080/sha256/abc"},
		"52:54:00:00:00:04": {Kind: KindRamdisk, Ramdisk: Ramdisk{Kernel: "vmlinuz", Initrd: "initrd", Token: "rt\nshell"}},
	}
	var d sink
	s := newServer(t, e, &d, clock.NewFake(time.Unix(1e9, 0)))
	learn(t, s, "52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03", "52:54:00:00:00:04", "52:54:00:00:00:09")
	h := s.HTTPHandler()
	cases := map[string]struct {
		path   string
		status int
		lines  []string // lines the body must hold
	}{
		"ramdisk": {path: "/boot/52-54-00-00-00-01.ipxe", status: 200, lines: []string{
			"kernel http://10.9.0.1/ramdisk/vmlinuz initrd=initrd console=ttyS0 bc.registry=https://registry:7443 bc.pins=sha256/a=,sha256/b= bc.token=rt_1 || goto failed",
			"initrd --name initrd http://cache/initrd.img || goto failed"}},
		"colon spelling":     {path: "/boot/52:54:00:00:00:02.ipxe", status: 200, lines: []string{"exit"}},
		"sanboot":            {path: "/boot/52-54-00-00-00-03.ipxe", status: 200, lines: []string{"sanboot --no-describe http://10.9.0.1:8080/sha256/abc || goto failed"}},
		"unsafe entry waits": {path: "/boot/52-54-00-00-00-04.ipxe", status: 200, lines: []string{"sleep 10", "chain --replace --autofree http://10.9.0.1/boot/52-54-00-00-00-04.ipxe"}},
		"unknown waits":      {path: "/boot/52-54-00-00-00-09.ipxe", status: 200, lines: []string{"sleep 10", "chain --replace --autofree http://10.9.0.1/boot/52-54-00-00-00-09.ipxe"}},
		"not a MAC":          {path: "/boot/nothing.ipxe", status: 404},
		"broadcast MAC":      {path: "/boot/ff-ff-ff-ff-ff-ff.ipxe", status: 404},
		"multicast MAC":      {path: "/boot/01-00-5e-00-00-01.ipxe", status: 404},
		"all-zero MAC":       {path: "/boot/00-00-00-00-00-00.ipxe", status: 404},
		"long MAC":           {path: "/boot/02-00-00-00-00-00-00-01.ipxe", status: 404},
		"not a script":       {path: "/boot/52-54-00-00-00-01", status: 404},
		"ramdisk file":       {path: "/ramdisk/vmlinuz", status: 200, lines: []string{"0123456789"}},
		"ipxe binary":        {path: "/ipxe/snponly.efi", status: 200, lines: []string{"efi"}},
		"traversal":          {path: "/ramdisk/..%2fsecret", status: 403},
		"missing file":       {path: "/ramdisk/none", status: 404},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", c.path, nil))
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			body := strings.Split(rec.Body.String(), "\n")
			for _, l := range c.lines {
				if !contains(body, l) {
					t.Errorf("body lacks line %q:\n%s", l, rec.Body)
				}
			}
		})
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/ramdisk/vmlinuz", nil)
	req.Header.Set("Range", "bytes=2-4")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusPartialContent || rec.Body.String() != "234" {
		t.Errorf("range request: %d %q", rec.Code, rec.Body)
	}
	if diff := cmp.Diff([]string{"52:54:00:00:00:09"}, macs(d.got)); diff != "" {
		t.Errorf("discoveries: %s", diff)
	}
}

// TestHTTPDownloadsReleasePlaces checks that every ramdisk download, whole, ranged or of
// a missing file, gives its place at the download gate back: with one place and no end
// to the wait, a place kept would leave every later download without an answer.
func TestHTTPDownloadsReleasePlaces(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTPDownloads, cfg.HTTPDownloadWait = 1, Duration(time.Hour)
	s, err := New(cfg, Deps{Entries: entries{}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.HTTPHandler()
	get := func(path, rng string) *httptest.ResponseRecorder {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, "GET", path, nil)
		req.RemoteAddr = "10.9.0.50:40000"
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			path, rng, want := "/ramdisk/vmlinuz", "", "0123456789"
			switch i % 3 {
			case 1:
				rng, want = "bytes=2-4", "234"
			case 2:
				path, want = "/ramdisk/none", "Not Found"
			}
			if rec := get(path, rng); !strings.HasPrefix(rec.Body.String(), want) {
				t.Errorf("GET %s %s: %d %q, want %q", path, rng, rec.Code, rec.Body, want)
			}
		})
	}
	wg.Wait()
	wantAllFree(t, s.gate, 1)
}

func contains(lines []string, l string) bool {
	for _, x := range lines {
		if x == l {
			return true
		}
	}
	return false
}

func macs(ds []Discovery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.MAC.String())
	}
	return out
}

// TestDiscovery drives the DHCP handler with an unknown machine's requests.
func TestDiscovery(t *testing.T) {
	known := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1}
	unknown := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 2}
	var d sink
	clk := clock.NewFake(time.Unix(1e9, 0))
	s := newServer(t, entries{known.String(): {Kind: KindDisk}}, &d, clk)
	uuid := append([]byte{0}, 0x78, 0x56, 0x34, 0x12, 0x34, 0x12, 0x78, 0x56, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0)
	send := func(mac net.HardwareAddr, withUUID bool) {
		mods := []dhcpv4.Modifier{dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover), dhcpv4.WithHwAddr(mac),
			dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007")), dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64))}
		if withUUID {
			mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, uuid))
		}
		req, _ := dhcpv4.New(mods...)
		s.DHCPHandler()(req)
	}
	send(known, true)
	send(unknown, false)
	send(unknown, false) // a repeat: not reported
	send(unknown, true)  // learned the UUID: reported
	send(unknown, true)
	clk.Advance(6 * time.Minute)
	send(unknown, true) // the interval passed: reported again
	want := []Discovery{
		{MAC: unknown, Arch: 7, HasArch: true, Source: "dhcp", At: time.Unix(1e9, 0)},
		{MAC: unknown, UUID: "12345678-1234-5678-1234-56789abcdef0", Arch: 7, HasArch: true, Source: "dhcp", At: time.Unix(1e9, 0)},
		{MAC: unknown, UUID: "12345678-1234-5678-1234-56789abcdef0", Arch: 7, HasArch: true, Source: "dhcp", At: time.Unix(1e9+360, 0)},
	}
	if diff := cmp.Diff(want, d.got); diff != "" {
		t.Error(diff)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	_, err := New(Config{}, Deps{Entries: entries{}})
	if !errors.Is(err, &proto.Error{Code: proto.InvalidConfig}) {
		t.Fatalf("got %v", err)
	}
	if _, err := New(testConfig(t), Deps{}); err == nil {
		t.Fatal("New without Entries succeeded")
	}
}

// TestRunFailsOnAMissingInterface: Run returns at once, naming what failed.
func TestRunFailsOnAMissingInterface(t *testing.T) {
	cfg := testConfig(t)
	cfg.Interface = "bc-missing0"
	s, err := New(cfg, Deps{Entries: entries{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "boot: dhcp on bc-missing0") {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

// TestGrowReadBuffer checks that a listening socket gets the receive buffer a boot storm
// needs: as root beyond net.core.rmem_max, otherwise up to it.
func TestGrowReadBuffer(t *testing.T) {
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got, err := growReadBuffer(conn, listenBuffer)
	want := 2 * listenBuffer // the kernel reports twice the payload it holds
	if os.Geteuid() != 0 {
		b, rerr := os.ReadFile("/proc/sys/net/core/rmem_max")
		if rerr != nil {
			t.Skip(rerr)
		}
		max, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		want = 2 * min(listenBuffer, max)
		err = nil // SO_RCVBUFFORCE is refused to others
	}
	if err != nil || got < want {
		t.Fatalf("receive buffer %d bytes (%v), want at least %d", got, err, want)
	}
}

// TestHTTPSendBuffer checks that the connections the HTTP listener accepts have the
// configured send buffer, and the kernel's default without one.
func TestHTTPSendBuffer(t *testing.T) {
	sndbuf := func(n int) int {
		lc := httpListenConfig(n)
		l, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		a, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		rc, err := a.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var got int
		rc.Control(func(fd uintptr) { got, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) })
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := sndbuf(256 << 10); got != 2*256<<10 { // the kernel reports twice the payload
		t.Errorf("send buffer %d, want %d", got, 2*256<<10)
	}
	if got := sndbuf(-1); got == 2*256<<10 {
		t.Errorf("send buffer %d without a setting", got)
	}
}

// TestHTTPTimeouts: an idle keep-alive connection is closed after httpIdleTimeout, and a
// client that stops reading a download is let go after httpStallTimeout; a download that
// keeps moving is never cut (checked by the fetches of the ramdisk over sendfile, here
// and in every VM test).
func TestHTTPTimeouts(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTPIdleTimeout, cfg.HTTPStallTimeout = Duration(time.Second), Duration(time.Second)
	const size = 256 << 20
	testkit.SparseFile(t, filepath.Join(cfg.RamdiskDir, "big"), size)
	s, err := New(cfg, Deps{Entries: entries{}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, hs, err := s.listenHTTP(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(l)
	defer hs.Close()
	get := func(path string) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: boot\r\n\r\n", path)
		return c, bufio.NewReader(c)
	}
	// ended reads what is left and reports whether the server closed the connection
	// within 30 s, and how many bytes came.
	ended := func(c net.Conn, r io.Reader) (bool, int64) {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := io.Copy(io.Discard, r)
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout()), n
	}

	t.Run("idle keep-alive", func(t *testing.T) {
		c, r := get("/ramdisk/vmlinuz")
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if closed, _ := ended(c, r); !closed {
			t.Error("the idle connection is still open after 30 s")
		}
	})
	t.Run("a moving download completes", func(t *testing.T) {
		for rng, want := range map[string]int64{"": size, "bytes=1-": size - 1, "bytes=-3000000": 3000000} {
			req, _ := http.NewRequest("GET", "http://"+l.Addr().String()+"/ramdisk/big", nil)
			if rng != "" {
				req.Header.Set("Range", rng)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || n != want {
				t.Errorf("range %q: %d bytes (%v), want %d", rng, n, err, want)
			}
		}
	})
	t.Run("client stops reading", func(t *testing.T) {
		c, r := get("/ramdisk/big")
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second) // five stall timeouts without reading
		closed, n := ended(c, resp.Body)
		if !closed || n >= size {
			t.Errorf("after 5 s without reading: closed %v, %d of %d bytes sent", closed, n, size)
		}
	})
}

// TestHTTPHeadersAreBounded is a host on the provisioning network opening connections to
// the boot server and sending on each a request whose header goes on and never ends: the
// server read up to 1 MiB of it on each until its 10 s header timeout, so 200 such
// connections held 200 MiB of the site's memory, and a few thousand more than it has.
// Now a header past httpMaxHeader is refused 431 and its connection closed, the held
// headers stay within a few MiB, and a machine's download is served meanwhile.
func TestHTTPHeadersAreBounded(t *testing.T) {
	base := startHTTP(t, newServer(t, entries{}, nil, nil))
	line := []byte("X-Pad: " + strings.Repeat("a", 1000) + "\r\n")
	const conns = 200
	runtime.GC()
	var before, held runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	for i := range conns {
		// Each from an address of its own, within httpConnsPerClient.
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 2, 0, byte(1+i))}}
		c, err := d.Dial("tcp4", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		wg.Go(func() {
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "GET /ramdisk/vmlinuz HTTP/1.1\r\nHost: boot\r\n")
			for range 1000 { // 1 MB of header, never ended
				if _, err := c.Write(line); err != nil {
					return // refused and closed
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(300 * time.Millisecond)
	runtime.GC()
	runtime.ReadMemStats(&held)
	if grew := int64(held.HeapInuse) - int64(before.HeapInuse); grew > 32<<20 {
		t.Errorf("%d connections sending headers that never end hold %d MiB, want at most 32", conns, grew>>20)
	}

	req, _ := http.NewRequest("GET", base+"/ramdisk/vmlinuz", nil)
	req.Header.Set("X-Pad", strings.Repeat("a", 2*httpMaxHeader))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a header of %d bytes: %v, %v; want 431", 2*httpMaxHeader, resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err := http.Get(base + "/ramdisk/vmlinuz")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "0123456789" {
		t.Errorf("a machine's download: %s, %q, %v", resp.Status, body, err)
	}
}

// startHTTP serves s's HTTP listener on loopback until the test ends and returns its
// base URL.
func startHTTP(t *testing.T, s *Server) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l, hs, err := s.listenHTTP(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close(); cancel() })
	return "http://" + l.Addr().String()
}

// TestRangeWithCurl asks for ranges of a 10-byte file as curl sends them: a suffix of
// length 0 is unsatisfiable (416, `bytes */10`), an unknown unit is ignored (200, the
// whole file), as RFC 9110 has it.
func TestRangeWithCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl (.ci/deps.sh installs it)")
	}
	base := startHTTP(t, newServer(t, entries{}, nil, nil))
	cases := []struct {
		name string
		args []string
		want string // status and Content-Range
		body string
	}{
		{"suffix of 0", []string{"-r", "-0"}, "416 bytes */10", ""},
		{"suffix of 00", []string{"-H", "Range: bytes=-00"}, "416 bytes */10", ""},
		{"a range and a suffix of 0", []string{"-H", "Range: bytes=2-4, -0"}, "206 bytes 2-4/10", "234"},
		{"unknown unit", []string{"-H", "Range: items=0-1"}, "200 ", "0123456789"},
		{"unit in capitals", []string{"-H", "Range: Bytes=1-2"}, "206 bytes 1-2/10", "12"},
		{"suffix", []string{"-r", "-3"}, "206 bytes 7-9/10", "789"},
		{"past the end", []string{"-r", "10-"}, "416 bytes */10", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"-sS", "-o", "-", "-w", "\n%{http_code} %header{content-range}"}, c.args...)
			out, err := exec.Command("curl", append(args, base+"/ramdisk/vmlinuz")...).Output()
			if err != nil {
				t.Fatalf("curl: %v", err)
			}
			i := strings.LastIndexByte(string(out), '\n')
			body, status := string(out[:i]), string(out[i+1:])
			if status != c.want || (c.body != "" && body != c.body) {
				t.Errorf("got %q, body %q; want %q, body %q", status, body, c.want, c.body)
			}
		})
	}
}

// FuzzMendRange: any Range header is handed on as it is, mended to bytes ranges without
// a zero suffix, or dropped; it never panics.
func FuzzMendRange(f *testing.F) {
	for _, s := range []string{"bytes=-0", "bytes=0-1,-0", "items=1-2", "bytes=", "=", "Bytes = -000 , 5-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := mendRange(v)
		if got == "" || got == unsatisfiable {
			return
		}
		set, ok := strings.CutPrefix(got, "bytes=")
		if !ok {
			t.Fatalf("%q became %q", v, got)
		}
		for _, spec := range strings.Split(set, ",") {
			if d, ok := strings.CutPrefix(spec, "-"); ok && d != "" && strings.Trim(d, "0") == "" {
				t.Fatalf("%q kept the zero suffix %q", v, spec)
			}
		}
	})
}

// TestSubnetLeaseTimeDefault: a routed subnet without a lease time takes the top-level
// one, and the defaults leave the caller's config as it was.
func TestSubnetLeaseTimeDefault(t *testing.T) {
	c := Config{LeaseTime: Duration(2 * time.Hour), Subnets: []Subnet{{}, {LeaseTime: Duration(time.Minute)}}}
	d := c.withDefaults()
	if d.Subnets[0].LeaseTime != c.LeaseTime || d.Subnets[1].LeaseTime != Duration(time.Minute) {
		t.Errorf("lease times %s, %s; want 2h, 1m", d.Subnets[0].LeaseTime, d.Subnets[1].LeaseTime)
	}
	if c.Subnets[0].LeaseTime != 0 {
		t.Error("withDefaults changed the caller's subnets")
	}
}
