package boot

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot/lease"
	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/google/go-cmp/cmp"
)

// TestRoutedThroughRelay is a routed provisioning network: the boot server on its
// segment (10.99.0.0/24), ISC's dhcrelay in a router namespace between it and two rack
// segments, 10.98.0.0/24, which the server serves as a routed subnet, and 10.97.0.0/24,
// which it does not. busybox udhcpc behind the relay gets an address of its rack's
// subnet with that subnet's router, DNS and lease time, and a boot file at the server's
// address, which it then fetches through the router by TFTP (tftp-hpa) and HTTP (curl);
// a client on the segment nobody serves gets nothing.
func TestRoutedThroughRelay(t *testing.T) {
	n := newTestNet(t, "busybox", "dhcrelay", "tftp", "curl")
	router := netns.New(t, "router")
	n.lan.Attach(t, router, "up0", "10.99.0.254/24", "")
	rack, other := netns.NewLAN(t), netns.NewLAN(t)
	rack.Attach(t, router, "rack0", "10.98.0.1/24", "")
	other.Attach(t, router, "rack1", "10.97.0.1/24", "")
	router.Run(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	n.server.Run(t, "ip", "route", "add", "10.96.0.0/14", "via", "10.99.0.254")
	rackClient, otherClient := netns.New(t, "rackc"), netns.New(t, "otherc")
	rack.Attach(t, rackClient, clientIf, "", "02:00:00:00:03:01")
	other.Attach(t, otherClient, clientIf, "", "02:00:00:00:03:02")

	cfg := netConfig(t, Authoritative)
	cfg.Subnets = []Subnet{{Subnet: netip.MustParsePrefix("10.98.0.0/24"),
		Range:  Range{Start: netip.MustParseAddr("10.98.0.50"), End: netip.MustParseAddr("10.98.0.60")},
		Router: netip.MustParseAddr("10.98.0.1"), DNS: []netip.Addr{netip.MustParseAddr("10.98.0.53")}, LeaseTime: Duration(30 * time.Minute)}}
	known := "02:00:00:00:03:03"
	startServer(t, n.server, cfg, map[string]Entry{known: {Kind: KindDisk}})
	startRelay(t, router, "10.99.0.1", "up0", "rack0", "rack1")

	pxe := []string{"-V", "PXEClient:Arch:00000:UNDI:003016", "-x", "0x5d:0000"}
	behind := testNet{lan: rack, server: n.server, client: rackClient}
	env := udhcpc(t, behind, "02:00:00:00:03:01", pxe...)
	if env == nil {
		t.Fatal("no lease behind the relay")
	}
	got := map[string]string{"subnet": env["subnet"], "router": env["router"], "dns": env["dns"], "lease": env["lease"],
		"serverid": env["serverid"], "boot_file": env["boot_file"], "siaddr": env["siaddr"]}
	want := map[string]string{"subnet": "255.255.255.0", "router": "10.98.0.1", "dns": "10.98.0.53", "lease": "1800",
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
	if ipxe == nil || ipxe["boot_file"] != "http://10.99.0.1/boot/02-00-00-00-03-03.ipxe" {
		t.Errorf("iPXE behind the relay: %v", ipxe)
	}

	// The machine reaches the server's TFTP and HTTP through its router.
	rackClient.Run(t, "ip", "addr", "add", ip.String()+"/24", "dev", clientIf)
	rackClient.Run(t, "ip", "route", "add", "default", "via", "10.98.0.1")
	dir := t.TempDir()
	rackClient.Run(t, "tftp", "-m", "binary", serverAddr, "-c", "get", "undionly.kpxe", filepath.Join(dir, "undionly.kpxe"))
	if st, err := os.Stat(filepath.Join(dir, "undionly.kpxe")); err != nil || st.Size() == 0 {
		t.Errorf("undionly.kpxe not fetched through the router: %v", err)
	}
	if script := rackClient.Run(t, "curl", "-sSf", "http://"+serverAddr+"/boot/02-00-00-00-03-03.ipxe"); !strings.Contains(script, "exit") {
		t.Errorf("script through the router:\n%s", script)
	}

	// The segment no subnet covers gets no answer.
	if env := udhcpc(t, testNet{lan: other, server: n.server, client: otherClient}, "02:00:00:00:03:02", pxe...); env != nil {
		t.Errorf("a client of 10.97.0.0/24, which no subnet covers, got a lease: %v", env)
	}
}

// startRelay runs ISC's dhcrelay in ns, relaying between the downstream interfaces and
// the server reached through upstream, until the test ends.
func startRelay(t *testing.T, ns *netns.NS, server, upstream string, downstream ...string) {
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
