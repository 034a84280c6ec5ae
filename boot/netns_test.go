package boot

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
)

// The test network: 10.99.0.0/24 inside namespaces the tests make.
const (
	serverAddr = "10.99.0.1"
	serverIf   = "bcs0"
	clientIf   = "bcc0"
	ipxeDir    = "/usr/lib/ipxe"
)

// testNet is a segment with the boot server's namespace and a client's.
type testNet struct {
	lan            *netns.LAN
	server, client *netns.NS
}

func newTestNet(t *testing.T, tools ...string) testNet {
	t.Helper()
	netns.Require(t, tools...)
	if _, err := os.Stat(filepath.Join(ipxeDir, "undionly.kpxe")); err != nil {
		t.Skipf("needs Debian's ipxe package (.ci/deps.sh installs it): %v", err)
	}
	n := testNet{lan: netns.NewLAN(t), server: netns.New(t, "boot"), client: netns.New(t, "client")}
	n.lan.Attach(t, n.server, serverIf, serverAddr+"/24", "")
	n.lan.Attach(t, n.client, clientIf, "", "02:00:00:00:00:01")
	return n
}

// netConfig is a boot server config for the test network.
func netConfig(t *testing.T, mode Mode) Config {
	c := Config{Interface: serverIf, Mode: mode, ServerIP: netip.MustParseAddr(serverAddr), IPXEDir: ipxeDir, RamdiskDir: t.TempDir()}
	if mode == Authoritative {
		c.Subnet = netip.MustParsePrefix("10.99.0.0/24")
		c.Range = Range{Start: netip.MustParseAddr("10.99.0.100"), End: netip.MustParseAddr("10.99.0.199")}
		c.LeaseFile = filepath.Join(t.TempDir(), "leases.db")
	}
	return c
}

// udhcpcScript records the environment udhcpc hands its script when bound.
const udhcpcScript = `#!/bin/sh
[ "$1" = bound ] && env > "$OUT"
exit 0
`

// udhcpc runs busybox udhcpc in the client namespace with mac and extra arguments, and
// returns the variables of the lease it bound (nil when it got none).
func udhcpc(t *testing.T, n testNet, mac string, args ...string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	out := filepath.Join(dir, "env")
	os.WriteFile(script, []byte(udhcpcScript), 0o755)
	n.client.Run(t, "ip", "link", "set", clientIf, "down")
	n.client.Run(t, "ip", "link", "set", clientIf, "address", mac)
	n.client.Run(t, "ip", "link", "set", clientIf, "up")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := n.client.Command(ctx, "busybox", append([]string{"udhcpc", "-f", "-q", "-n", "-t", "5", "-T", "1", "-i", clientIf, "-s", script}, args...)...)
	cmd.Env = append(os.Environ(), "OUT="+out)
	log, _ := cmd.CombinedOutput()
	b, err := os.ReadFile(out)
	if err != nil {
		t.Logf("udhcpc %v got no lease:\n%s", args, log)
		return nil
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env
}

// TestAuthoritativeWithRealClients runs the authoritative server in a namespace and
// busybox udhcpc in another, as firmware of each architecture would ask.
func TestAuthoritativeWithRealClients(t *testing.T) {
	n := newTestNet(t, "busybox")
	known := "02:00:00:00:00:05"
	srv := startServer(t, n.server, netConfig(t, Authoritative), map[string]Entry{
		known: {Kind: KindRamdisk, Ramdisk: Ramdisk{Kernel: "vmlinuz", Initrd: "initrd.img", Token: "rt_e2e", Args: []string{"console=ttyS0"}}},
	})
	pxe := func(arch string) []string {
		return []string{"-V", "PXEClient:Arch:000" + arch + ":UNDI:003016", "-x", "0x5d:00" + arch}
	}
	type want struct{ BootFile, Siaddr string }
	cases := []struct {
		name string
		mac  string
		args []string
		want want
	}{
		{"BIOS", "02:00:00:00:00:01", append(pxe("00"), "-x", "0x61:0012345678123456781234567812345678"), want{"undionly.kpxe", serverAddr}},
		{"UEFI x86-64", "02:00:00:00:00:02", pxe("07"), want{"snponly.efi", serverAddr}},
		{"UEFI byte code", "02:00:00:00:00:03", pxe("09"), want{"snponly.efi", serverAddr}},
		{"UEFI HTTP boot", "02:00:00:00:00:04", []string{"-V", "HTTPClient:Arch:00016:UNDI:003001", "-x", "0x5d:0010"}, want{"http://10.99.0.1/ipxe/snponly.efi", serverAddr}},
		{"iPXE", known, append(pxe("00"), "-x", "0x4d:69505845"), want{"http://10.99.0.1/boot/02-00-00-00-00-05.ipxe", serverAddr}},
		{"arm64 without a binary", "02:00:00:00:00:06", pxe("11"), want{"", serverAddr}},
		{"plain client", "02:00:00:00:00:07", nil, want{"", serverAddr}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := udhcpc(t, n, c.mac, c.args...)
			if env == nil {
				t.Fatal("no lease")
			}
			if !strings.HasPrefix(env["ip"], "10.99.0.1") || env["subnet"] != "255.255.255.0" || env["serverid"] != serverAddr {
				t.Errorf("lease ip=%s subnet=%s serverid=%s", env["ip"], env["subnet"], env["serverid"])
			}
			got := want{BootFile: env["boot_file"], Siaddr: env["siaddr"]}
			if got.BootFile == "" {
				got.Siaddr = c.want.Siaddr // siaddr is only meaningful with a boot file
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("boot answer (-want +got):\n%s", diff)
			}
		})
	}
	// Every network-boot machine without an entry was reported once; the BIOS one with
	// its product UUID.
	var got []string
	for _, d := range srv.Discoveries(t) {
		got = append(got, d.MAC.String()+" "+d.UUID)
	}
	wantDisc := []string{"02:00:00:00:00:01 78563412-3412-7856-1234-567812345678", "02:00:00:00:00:02 ", "02:00:00:00:00:03 ",
		"02:00:00:00:00:04 ", "02:00:00:00:00:06 "}
	if diff := cmp.Diff(wantDisc, got); diff != "" {
		t.Errorf("discoveries (-want +got):\n%s", diff)
	}

	// The same client keeps its address across a restart of udhcpc: the lease is kept.
	first := udhcpc(t, n, "02:00:00:00:00:09")
	again := udhcpc(t, n, "02:00:00:00:00:09")
	if first["ip"] == "" || first["ip"] != again["ip"] {
		t.Errorf("second lease %q, want the first's %q", again["ip"], first["ip"])
	}

	t.Run("TFTP and HTTP", func(t *testing.T) { fetches(t, n, srv, known) })
}

// TestNeverLeasesOwnOrRouterAddress puts the server's own address and the router's
// inside a range of six, and has busybox udhcpc ask for an address as eight machines:
// the four other addresses go to the first four, the rest get none, and neither the
// server's address nor the router's is ever offered.
func TestNeverLeasesOwnOrRouterAddress(t *testing.T) {
	n := newTestNet(t, "busybox")
	cfg := netConfig(t, Authoritative)
	cfg.Router = netip.MustParseAddr("10.99.0.2")
	cfg.Range = Range{Start: netip.MustParseAddr("10.99.0.1"), End: netip.MustParseAddr("10.99.0.6")}
	cfg.UnknownShare = 1 // the eight machines have no entry
	startServer(t, n.server, cfg, nil)
	var leased []string
	for i := range 8 {
		env := udhcpc(t, n, fmt.Sprintf("02:00:00:00:02:%02x", i))
		if env == nil {
			continue
		}
		leased = append(leased, env["ip"])
		if env["router"] != "10.99.0.2" {
			t.Errorf("lease %s: router %q, want 10.99.0.2", env["ip"], env["router"])
		}
	}
	slices.Sort(leased)
	if diff := cmp.Diff([]string{"10.99.0.3", "10.99.0.4", "10.99.0.5", "10.99.0.6"}, leased); diff != "" {
		t.Errorf("addresses leased (-want +got):\n%s", diff)
	}
}

// fetches checks TFTP and HTTP with real clients: tftp-hpa and curl.
func fetches(t *testing.T, n testNet, srv *bootServer, known string) {
	netns.Require(t, "tftp", "curl")
	n.client.Run(t, "ip", "addr", "replace", "10.99.0.250/24", "dev", clientIf)
	dir := t.TempDir()
	want, err := os.ReadFile(filepath.Join(ipxeDir, "undionly.kpxe"))
	if err != nil {
		t.Fatal(err)
	}
	same := func(name string) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes (%v), want the %d of undionly.kpxe", name, len(got), err, len(want))
		}
	}
	n.client.Run(t, "tftp", "-m", "binary", serverAddr, "-c", "get", "undionly.kpxe", filepath.Join(dir, "hpa"))
	same("hpa")
	n.client.Run(t, "curl", "-sS", "--tftp-blksize", "1468", "-o", filepath.Join(dir, "curl"), "tftp://"+serverAddr+"/undionly.kpxe")
	same("curl")
	// The server logs a transfer once it has the last acknowledgement, which may be just
	// after curl, holding all the blocks, has exited.
	testkit.WaitFor(t, "a transfer with blksize 1468 in the server log", 10*time.Second, 10*time.Millisecond,
		func() bool { return strings.Contains(srv.log.String(), "blksize=1468") })

	// Traversal: tftp-hpa reports the error; curl exits non-zero; nothing is written.
	out := n.client.Run(t, "tftp", "-m", "binary", serverAddr, "-c", "get", "../../../../etc/hostname", filepath.Join(dir, "escape"))
	if b, _ := os.ReadFile(filepath.Join(dir, "escape")); len(b) > 0 || !strings.Contains(out, "Error code 2: access violation") {
		t.Errorf("traversal over TFTP: output %q, file %q; want error code 2, access violation", out, b)
	}
	out = n.client.Run(t, "tftp", "-m", "binary", serverAddr, "-c", "get", "nothing.efi", filepath.Join(dir, "missing"))
	if !strings.Contains(out, "Error code 1: file not found") {
		t.Errorf("missing file over TFTP: output %q, want error code 1, file not found", out)
	}
	out = n.client.Run(t, "tftp", "-m", "binary", serverAddr, "-c", "put", filepath.Join(dir, "hpa"), "upload")
	if !strings.Contains(out, "Error code 2: access violation") {
		t.Errorf("write over TFTP: output %q, want error code 2, access violation", out)
	}
	ctx := context.Background()
	if b, err := n.client.Command(ctx, "curl", "-sS", "-o", "-", "tftp://"+serverAddr+"/..%2f..%2f..%2fetc%2fhostname").CombinedOutput(); err == nil {
		t.Errorf("curl fetched a file outside the root: %q", b)
	}
	if b, err := n.client.Command(ctx, "curl", "-sSf", "http://"+serverAddr+"/ramdisk/..%2f..%2f..%2fetc%2fhostname").CombinedOutput(); err == nil {
		t.Errorf("curl fetched a file outside the ramdisk directory: %q", b)
	}

	// Scripts over HTTP: from another address than the one leased to the machine, the
	// wait that asks DHCP again and no token; from its own, the ramdisk and its token.
	scriptURL := "http://" + serverAddr + "/boot/" + strings.ReplaceAll(known, ":", "-") + ".ipxe"
	if script := n.client.Run(t, "curl", "-sSf", scriptURL); strings.Contains(script, "rt_e2e") || !strings.Contains(script, "\ndhcp netX ") {
		t.Errorf("the ramdisk script from 10.99.0.250, not the machine's address:\n%s", script)
	}
	env := udhcpc(t, n, known, "-V", "PXEClient:Arch:00000:UNDI:003016", "-x", "0x4d:69505845")
	if env == nil {
		t.Fatal("no lease for the known machine")
	}
	n.client.Run(t, "ip", "addr", "add", env["ip"]+"/24", "dev", clientIf)
	script := n.client.Run(t, "curl", "-sSf", "--interface", env["ip"], scriptURL)
	if !strings.Contains(script, "\nkernel http://10.99.0.1/ramdisk/vmlinuz initrd=initrd console=ttyS0 bc.token=rt_e2e || goto failed\n") {
		t.Errorf("ramdisk script from the machine's leased address %s:\n%s", env["ip"], script)
	}
	// A group or all-zero MAC names no machine: 404, and nothing is discovered.
	before := len(srv.Discoveries(t))
	for _, mac := range []string{"ff-ff-ff-ff-ff-ff", "01-00-5e-00-00-fb", "00-00-00-00-00-00"} {
		if b, err := n.client.Command(ctx, "curl", "-sSf", "http://"+serverAddr+"/boot/"+mac+".ipxe").CombinedOutput(); err == nil {
			t.Errorf("curl got a script for %s: %q", mac, b)
		}
	}
	if got := srv.Discoveries(t); len(got) != before {
		t.Errorf("discoveries after impossible MACs: %+v", got[before:])
	}
	wait := n.client.Run(t, "curl", "-sSf", "http://"+serverAddr+"/boot/02-00-00-00-00-77.ipxe")
	if !strings.Contains(wait, "\nsleep 10\n") {
		t.Errorf("unknown machine's script:\n%s", wait)
	}
}

// TestProxyBesideDnsmasq runs dnsmasq as the network's plain DHCP server and the boot
// server in proxy mode beside it; a PXE probe collects both offers as firmware of each
// architecture would, and the UEFI one then asks the proxy on port 4011.
func TestProxyBesideDnsmasq(t *testing.T) {
	n := newTestNet(t, "dnsmasq", "tftp")
	startDnsmasq(t, n)
	srv := startServer(t, n.server, netConfig(t, Proxy), nil)
	n.client.Run(t, "ip", "addr", "add", "10.99.0.250/24", "dev", clientIf)

	offer := func(file, vendor string) probeReply {
		return probeReply{Port: 67, Type: "OFFER", YourIP: "0.0.0.0", ServerIP: serverAddr, ServerID: serverAddr, File: file, Vendor: vendor}
	}
	cases := []struct {
		name string
		spec probeSpec
		want []probeReply
	}{
		{"BIOS", probeSpec{Arch: 0}, []probeReply{offer("undionly.kpxe", "PXEClient")}},
		{"UEFI x86-64, then port 4011", probeSpec{Arch: 7, Proxy: serverAddr + ":4011", ProxyArch: 7, ClientIP: "10.99.0.250"}, []probeReply{
			offer("snponly.efi", "PXEClient"),
			{Port: 4011, Type: "ACK", YourIP: "0.0.0.0", ServerIP: serverAddr, ServerID: serverAddr, File: "snponly.efi", Vendor: "PXEClient"}}},
		{"UEFI byte code", probeSpec{Arch: 9}, []probeReply{offer("snponly.efi", "PXEClient")}},
		{"UEFI HTTP boot", probeSpec{Arch: 16, Vendor: "HTTPClient:Arch:00016:UNDI:003001"}, []probeReply{offer("http://10.99.0.1/ipxe/snponly.efi", "HTTPClient")}},
		{"iPXE", probeSpec{Arch: 0, IPXE: true}, []probeReply{offer("http://10.99.0.1/boot/02-00-00-00-00-14.ipxe", "PXEClient")}},
		{"arm64 without a binary", probeSpec{Arch: 11}, nil},
		{"plain client", probeSpec{Vendor: "udhcp 1.35.0"}, nil},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := c.spec
			spec.Interface, spec.MAC, spec.Wait = clientIf, fmt.Sprintf("02:00:00:00:00:%02x", 0x10+i), 1500*time.Millisecond
			spec.UUID = "00112233445566778899aabbccddeeff"
			replies := runProbe(t, n.client, spec)
			// dnsmasq's offer carries the address; the proxy's the boot file and no address.
			var got []probeReply
			fromDnsmasq := 0
			for _, r := range replies {
				if r.ServerID == "10.99.0.2" {
					fromDnsmasq++
					if !strings.HasPrefix(r.YourIP, "10.99.0.1") || r.File != "" {
						t.Errorf("dnsmasq's offer: %+v", r)
					}
					continue
				}
				got = append(got, r)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("proxy replies (-want +got):\n%s\nall replies: %+v", diff, replies)
			}
			if fromDnsmasq != 1 {
				t.Errorf("%d offers from dnsmasq, want 1: %+v", fromDnsmasq, replies)
			}
		})
	}
	// Every network-boot probe was reported once, with its UUID; the plain client not.
	ds := srv.Discoveries(t)
	if len(ds) != 6 || ds[0].UUID != "33221100-5544-7766-8899-aabbccddeeff" {
		t.Errorf("discoveries %+v, want the six network-boot probes with their UUID", ds)
	}
	// The boot file comes by TFTP.
	dir := t.TempDir()
	n.client.Run(t, "tftp", "-m", "binary", serverAddr, "-c", "get", "snponly.efi", filepath.Join(dir, "snponly.efi"))
	if st, err := os.Stat(filepath.Join(dir, "snponly.efi")); err != nil || st.Size() == 0 {
		t.Errorf("snponly.efi not fetched: %v", err)
	}
}

// TestProxyLeavesOtherServersRequests: a PXE client that took dnsmasq's offer broadcasts
// a DHCPREQUEST naming dnsmasq (option 54); only dnsmasq answers it. The proxy's ACK,
// without an address, used to arrive first, and a client that takes the first ACK of its
// transaction would have ended with 0.0.0.0.
func TestProxyLeavesOtherServersRequests(t *testing.T) {
	n := newTestNet(t, "dnsmasq")
	startDnsmasq(t, n)
	startServer(t, n.server, netConfig(t, Proxy), nil)
	for _, arch := range []uint16{0, 7} {
		t.Run(fmt.Sprintf("arch %d", arch), func(t *testing.T) {
			replies := runProbe(t, n.client, probeSpec{Interface: clientIf, MAC: fmt.Sprintf("02:00:00:00:01:%02x", arch), Arch: arch,
				UUID: "00112233445566778899aabbccddeeff", Wait: 1500 * time.Millisecond, Select: true})
			var acks []probeReply
			for _, r := range replies {
				if r.Type == "ACK" {
					acks = append(acks, r)
				}
			}
			if len(acks) != 1 || acks[0].ServerID != "10.99.0.2" || !strings.HasPrefix(acks[0].YourIP, "10.99.0.1") {
				t.Errorf("ACKs %+v, want dnsmasq's alone, with an address; all replies %+v", acks, replies)
			}
		})
	}
}

// runProbe runs the PXE probe in ns and returns its replies.
func runProbe(t *testing.T, ns *netns.NS, spec probeSpec) []probeReply {
	t.Helper()
	cmd := helperCommand(t, ns, "probe", spec)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("probe: %s", stderr.String())
	}
	var replies []probeReply
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var r probeReply
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		replies = append(replies, r)
	}
	return replies
}

// startDnsmasq runs dnsmasq as the segment's plain DHCP server (10.99.0.2, leasing
// 10.99.0.100-150) in a namespace of its own, until the test ends. It offers without
// checking the address first (--no-ping): its check holds every DHCP request up to 3 s,
// beyond what the tests' probes wait for the offers of both servers.
func startDnsmasq(t *testing.T, n testNet) {
	t.Helper()
	dhcpNS := netns.New(t, "dhcp")
	n.lan.Attach(t, dhcpNS, "bcd0", "10.99.0.2/24", "")
	runDnsmasq(t, dhcpNS, "bcd0", "--dhcp-range=10.99.0.100,10.99.0.150,1h", "--log-dhcp", "--no-ping")
}

// runDnsmasq runs dnsmasq as a DHCP server only (no DNS) on iface in ns, with its lease
// file in a temporary directory, waits until it has bound the DHCP port, and returns a
// function that stops it (the test's end calls it too). Like the boot server by
// default, it checks an address with an ICMP echo before it offers it, unless args say
// --no-ping.
func runDnsmasq(t testing.TB, ns *netns.NS, iface string, args ...string) (stop func()) {
	t.Helper()
	return runDnsmasqLeases(t, ns, iface, nil, args...)
}

// runDnsmasqLeases is runDnsmasq with its lease file holding leases (dnsmasq's format)
// when it starts.
func runDnsmasqLeases(t testing.TB, ns *netns.NS, iface string, leaseFile []byte, args ...string) (stop func()) {
	t.Helper()
	leases := filepath.Join(t.TempDir(), "dnsmasq.leases")
	if err := os.WriteFile(leases, leaseFile, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	dnsmasq := ns.Command(ctx, "dnsmasq", append([]string{"--no-daemon", "--conf-file=/dev/null", "--port=0", "--interface=" + iface,
		"--bind-interfaces", "--dhcp-leasefile=" + leases, "--pid-file=", "--user=root"}, args...)...)
	var dlog netns.SyncBuffer
	dnsmasq.Stdout, dnsmasq.Stderr = &dlog, &dlog
	if err := dnsmasq.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { dnsmasq.Wait(); close(exited) }()
	stop = sync.OnceFunc(func() {
		cancel()
		<-exited
	})
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("dnsmasq log:\n%s", dlog.String())
		}
	})
	waitDHCPBound(t, dnsmasq.Process.Pid, "dnsmasq", exited)
	return stop
}

// waitDHCPBound waits until the process pid, once it runs the program comm (ip netns
// exec has entered the namespace then), holds a UDP socket on port 67 in its network
// namespace; datagrams that arrive from then on wait in the socket for its loop. It fails
// the test when exited closes first or after 20 s.
func waitDHCPBound(t testing.TB, pid int, comm string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		name, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(name)) == comm {
			udp, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/udp", pid))
			if bytes.Contains(udp, []byte(":0043 ")) {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("%s exited before it bound port 67", comm)
		case <-deadline:
			t.Fatalf("%s did not bind port 67 within 20 s", comm)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
