package boot

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot/lease"
	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
)

// TestRoutedThroughRelay is a routed provisioning network: the boot server on its
// segment (10.99.0.0/24), ISC's dhcrelay in a router namespace between it and two rack
// segments, 10.98.0.0/24, which the server serves as a routed subnet, and 10.97.0.0/24,
// which it does not. busybox udhcpc behind the relay gets an address of its rack's
// subnet with that subnet's router and DNS, the short lease of a machine the site does not
// know (a known one gets the subnet's lease time), and a boot file at the server's address, which it then fetches through the router by TFTP (tftp-hpa) and HTTP (curl);
// a client on the segment nobody serves gets nothing.
func TestRoutedThroughRelay(t *testing.T) {
	r := newRoutedNet(t, "busybox", "tftp", "curl")
	n, rack, other, rackClient, otherClient := r.testNet, r.rack, r.other, r.rackClient, r.otherClient
	cfg := r.config(t)
	known := "02:00:00:00:03:03"
	startServer(t, n.server, cfg, map[string]Entry{known: {Kind: KindDisk}})
	r.startRelay(t)

	pxe := []string{"-V", "PXEClient:Arch:00000:UNDI:003016", "-x", "0x5d:0000"}
	behind := testNet{lan: rack, server: n.server, client: rackClient}
	env := udhcpc(t, behind, "02:00:00:00:03:01", pxe...)
	if env == nil {
		t.Fatal("no lease behind the relay")
	}
	got := map[string]string{"subnet": env["subnet"], "router": env["router"], "dns": env["dns"], "lease": env["lease"],
		"serverid": env["serverid"], "boot_file": env["boot_file"], "siaddr": env["siaddr"]}
	want := map[string]string{"subnet": "255.255.255.0", "router": "10.98.0.1", "dns": "10.98.0.53", "lease": "600",
		"serverid": serverAddr, "boot_file": "undionly.kpxe", "siaddr": serverAddr}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lease behind the relay (-want +got):\n%s", diff)
	}
	ip := netip.MustParseAddr(env["ip"])
	if r := cfg.Subnets[0].Range; !(lease.Range{Start: r.Start, End: r.End}).Contains(ip) {
		t.Fatalf("leased %s, want an address of 10.98.0.50-60", ip)
	}
	// iPXE behind the relay is given its script at the server's address.
	ipxe := udhcpc(t, behind, known, append(pxe, "-x", "0x4d:69505845")...)
	if ipxe == nil || ipxe["boot_file"] != "http://10.99.0.1/boot/02-00-00-00-03-03.ipxe" || ipxe["lease"] != "1800" {
		t.Errorf("iPXE of a known machine behind the relay, want its script and the subnet's lease time of 1800 s: %v", ipxe)
	}

	// The machine reaches the server's TFTP and HTTP through its router, from the
	// address leased to it: relayed, its requests keep that address.
	known4 := ipxe["ip"]
	rackClient.Run(t, "ip", "addr", "add", known4+"/24", "dev", clientIf)
	rackClient.Run(t, "ip", "route", "add", "default", "via", "10.98.0.1")
	dir := t.TempDir()
	rackClient.Run(t, "tftp", "-m", "binary", serverAddr, "-c", "get", "undionly.kpxe", filepath.Join(dir, "undionly.kpxe"))
	if st, err := os.Stat(filepath.Join(dir, "undionly.kpxe")); err != nil || st.Size() == 0 {
		t.Errorf("undionly.kpxe not fetched through the router: %v", err)
	}
	if script := rackClient.Run(t, "curl", "-sSf", "http://"+serverAddr+"/boot/02-00-00-00-03-03.ipxe"); !strings.Contains(script, "exit") {
		t.Errorf("script through the router:\n%s", script)
	}
	// From the other machine's address, leased to 02:00:00:00:03:01, it gets the wait.
	rackClient.Run(t, "ip", "addr", "add", ip.String()+"/24", "dev", clientIf)
	if script := rackClient.Run(t, "curl", "-sSf", "--interface", ip.String(), "http://"+serverAddr+"/boot/02-00-00-00-03-03.ipxe"); strings.Contains(script, "exit") || !strings.Contains(script, "dhcp netX") {
		t.Errorf("the script of 02:00:00:00:03:03 through the router from 02:00:00:00:03:01's address:\n%s", script)
	}

	// The segment no subnet covers gets no answer.
	if env := udhcpc(t, testNet{lan: other, server: n.server, client: otherClient}, "02:00:00:00:03:02", pxe...); env != nil {
		t.Errorf("a client of 10.97.0.0/24, which no subnet covers, got a lease: %v", env)
	}
}

// routedNet is the routed layout of TestRoutedThroughRelay: the server's segment
// (10.99.0.0/24), a router namespace on it (10.99.0.254) forwarding to the rack segment
// 10.98.0.0/24 (router 10.98.0.1) and the segment 10.97.0.0/24 (10.97.0.1), with a client
// namespace on each of the two.
type routedNet struct {
	testNet
	router                  *netns.NS
	rack, other             *netns.LAN
	rackClient, otherClient *netns.NS
}

func newRoutedNet(t *testing.T, tools ...string) routedNet {
	t.Helper()
	r := routedNet{testNet: newTestNet(t, append(tools, "dhcrelay")...)}
	r.router = netns.New(t, "router")
	r.lan.Attach(t, r.router, "up0", "10.99.0.254/24", "")
	r.rack, r.other = netns.NewLAN(t), netns.NewLAN(t)
	r.rack.Attach(t, r.router, "rack0", "10.98.0.1/24", "")
	r.other.Attach(t, r.router, "rack1", "10.97.0.1/24", "")
	r.router.Run(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	r.server.Run(t, "ip", "route", "add", "10.96.0.0/14", "via", "10.99.0.254")
	r.rackClient, r.otherClient = netns.New(t, "rackc"), netns.New(t, "otherc")
	r.rack.Attach(t, r.rackClient, clientIf, "", "02:00:00:00:03:01")
	r.other.Attach(t, r.otherClient, clientIf, "", "02:00:00:00:03:02")
	return r
}

// config is an authoritative config of the server's segment with the rack segment as
// a routed subnet (range 10.98.0.50-60, DNS 10.98.0.53, leases of 30 minutes).
func (r routedNet) config(t *testing.T) Config {
	cfg := netConfig(t, Authoritative)
	cfg.Subnets = []Subnet{{Subnet: netip.MustParsePrefix("10.98.0.0/24"),
		Range:  Range{Start: netip.MustParseAddr("10.98.0.50"), End: netip.MustParseAddr("10.98.0.60")},
		Router: netip.MustParseAddr("10.98.0.1"), DNS: []netip.Addr{netip.MustParseAddr("10.98.0.53")}, LeaseTime: Duration(30 * time.Minute)}}
	return cfg
}

// startRelay runs dhcrelay on the router, between both rack segments and the server.
func (r routedNet) startRelay(t *testing.T) {
	startRelay(t, r.router, serverAddr, "up0", "rack0", "rack1")
}

// TestVMBootsRamdiskThroughRelay PXE-boots a qemu VM on the rack segment, behind the
// relay and the router, into the test ramdisk: its iPXE ROM's DHCP goes through
// dhcrelay, and its script, kernel and initrd come from the server's address through the
// router.
func TestVMBootsRamdiskThroughRelay(t *testing.T) {
	netns.Require(t, "qemu-system-x86_64")
	if _, err := os.Stat(vmROM); err != nil {
		t.Skipf("needs qemu's iPXE ROMs (ipxe-qemu): %v", err)
	}
	dir := testkit.RamdiskImage(t)
	r := newRoutedNet(t)
	cfg := r.config(t)
	cfg.RamdiskDir = dir
	startServer(t, r.server, cfg, map[string]Entry{vmMAC: {Kind: KindRamdisk, Ramdisk: Ramdisk{Kernel: "vmlinuz", Initrd: "initrd.img",
		Token: "rt_routed", Args: []string{"console=ttyS0", "panic=-1"}}}})
	r.startRelay(t)
	console := startVM(t, testNet{lan: r.rack, server: r.server, client: r.rackClient})
	start := time.Now()
	line := ramdiskCommandLine(t, console)
	t.Logf("ramdisk up behind the relay after %s", time.Since(start).Round(time.Second))
	if want := "initrd=initrd console=ttyS0 panic=-1 bc.token=rt_routed"; strings.TrimSpace(line) != want {
		t.Errorf("ramdisk command line\n got: %q\nwant: %q", line, want)
	}
}

// startRelay runs ISC's dhcrelay in ns, relaying between the downstream interfaces and
// the server reached through upstream, until the test ends.
func startRelay(t testing.TB, ns *netns.NS, server, upstream string, downstream ...string) {
	t.Helper()
	args := []string{"-4", "-d", "--no-pid", "-iu", upstream}
	for _, d := range downstream {
		args = append(args, "-id", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := ns.Command(ctx, "dhcrelay", append(args, server)...)
	var log netns.SyncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := sync.OnceFunc(func() { cancel(); cmd.Wait() })
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("dhcrelay log:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), "Sending on") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// dhclientScript records each of dhclient's reasons with its address in the file OUT
// (dhclient clears the environment of its script), and configures the address and
// default route on BOUND as dhclient-script would.
const dhclientScript = `#!/bin/sh
echo "$reason $new_ip_address $new_routers $new_dhcp_lease_time" >> OUT
case "$reason" in
BOUND) ip addr add "$new_ip_address/24" dev "$interface" && ip route add default via "$new_routers" ;;
esac
exit 0
`

// TestDhclientRenewsThroughRouter: ISC dhclient behind the relay binds an address of the
// rack's subnet (leases of a minute), then renews it at T1, unicast to the server
// through the router: the server answers from the subnet of the client's address, and
// dhclient reports RENEW, not the REBIND that follows an unanswered renewal. (dhcrelay
// on the router also relays the renewal it sees pass, so the server gets it twice, once
// straight with ciaddr and once relayed with giaddr, and answers both; TestRelayed
// covers the straight one alone.)
func TestDhclientRenewsThroughRouter(t *testing.T) {
	r := newRoutedNet(t, "dhclient")
	cfg := r.config(t)
	cfg.Subnets[0].LeaseTime = Duration(time.Minute)
	startServer(t, r.server, cfg, nil)
	r.startRelay(t)
	out := filepath.Join(t.TempDir(), "events")
	r.rackClient.StartDhclient(t, clientIf, strings.Replace(dhclientScript, "OUT", out, 1))
	events := func() []string {
		b, _ := os.ReadFile(out)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	deadline := time.Now().Add(100 * time.Second)
	for !slices.ContainsFunc(events(), func(e string) bool { return strings.HasPrefix(e, "RENEW ") || strings.HasPrefix(e, "REBIND ") }) {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal in 100 s; events %q", events())
		}
		time.Sleep(250 * time.Millisecond)
	}
	ev := events()
	var bound string
	for _, e := range ev {
		if f := strings.Fields(e); len(f) >= 3 && (f[0] == "BOUND" || f[0] == "RENEW" || f[0] == "REBIND") {
			if bound == "" {
				bound = f[1]
			}
			if f[0] == "REBIND" || f[1] != bound || f[2] != "10.98.0.1" || !strings.HasPrefix(f[1], "10.98.0.") {
				t.Errorf("event %q; want BOUND then RENEW of one address of 10.98.0.0/24 with router 10.98.0.1 (all: %q)", e, ev)
			}
		}
	}
}
