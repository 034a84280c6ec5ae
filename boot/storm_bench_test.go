package boot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/e2e/netns"
)

// stormClients is how many machines boot at once in BenchmarkBootStorm.
const stormClients = 100

// BenchmarkBootStorm starts stormClients simulated iPXE machines at once; each leases an
// address, fetches its script and then an 8 MiB kernel and a 1 MiB initrd. It runs
// against the boot server alone, then against dnsmasq (DHCP, a boot file for user class
// iPXE) with nginx (a static script and the same files), and reports boots per second of
// each and their ratio.
func BenchmarkBootStorm(b *testing.B) {
	netns.Require(b, "dnsmasq", "nginx")
	srvNS, cliNS, cfg := benchNet(b)
	dir := cfg.RamdiskDir
	for name, size := range map[string]int{"vmlinuz": 8 << 20, "initrd.img": 1 << 20} {
		if err := randomFile(filepath.Join(dir, name), size); err != nil {
			b.Fatal(err)
		}
	}
	base := "http://" + serverAddr
	script := fmt.Sprintf("#!ipxe\nkernel %s/ramdisk/vmlinuz initrd=initrd console=ttyS0 || goto failed\ninitrd --name initrd %s/ramdisk/initrd.img || goto failed\nboot\n", base, base)
	if err := os.WriteFile(filepath.Join(dir, "boot.ipxe"), []byte(script), 0o644); err != nil {
		b.Fatal(err)
	}
	entries := map[string]Entry{}
	for i := range stormClients {
		entries[fmt.Sprintf("02:bb:00:00:%02x:%02x", i>>8, i&0xff)] = Entry{Kind: KindRamdisk,
			Ramdisk: Ramdisk{Kernel: "vmlinuz", Initrd: "initrd.img", Token: "rt_storm", Args: []string{"console=ttyS0"}}}
	}
	for range b.N {
		srv := startServer(b, srvNS, cfg, entries)
		ours := runStorm(b, cliNS)
		srv.stop()

		stopDHCP := runDnsmasq(b, srvNS, serverIf, append(dnsmasqRange, "--dhcp-userclass=set:ipxe,iPXE",
			"--dhcp-boot=tag:ipxe,"+base+"/ramdisk/boot.ipxe")...)
		stopHTTP := runNginx(b, srvNS, dir)
		time.Sleep(500 * time.Millisecond)
		peer := runStorm(b, cliNS)
		stopHTTP()
		stopDHCP()

		rate := func(r stormResult) float64 { return float64(r.Booted) / r.Wall.Seconds() }
		b.ReportMetric(rate(ours), "boots/s")
		b.ReportMetric(rate(peer), "dnsmasq+nginx-boots/s")
		b.ReportMetric(rate(ours)/rate(peer), "ratio-vs-dnsmasq+nginx")
		b.ReportMetric(ours.P99.Seconds(), "p99-s")
		b.ReportMetric(peer.P99.Seconds(), "dnsmasq+nginx-p99-s")
	}
}

// runStorm runs a storm from ns and fails the benchmark unless every machine booted.
func runStorm(b *testing.B, ns *netns.NS) stormResult {
	b.Helper()
	spec, _ := json.Marshal(stormSpec{Interface: clientIf, Clients: stormClients, Timeout: 2 * time.Minute})
	specFile := filepath.Join(b.TempDir(), "storm.json")
	os.WriteFile(specFile, spec, 0o644)
	cmd := ns.Command(context.Background(), os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=storm", "BC_BOOT_HELPER_SPEC="+specFile)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var r stormResult
	if err != nil || json.Unmarshal(out, &r) != nil {
		b.Fatalf("storm: %v\n%s%s", err, out, stderr.String())
	}
	b.Logf("%d booted, %d failed in %v (p50 %v, p99 %v), %d MiB %v", r.Booted, r.Failed, r.Wall.Round(time.Millisecond),
		r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Bytes>>20, r.Errors)
	if r.Failed > 0 {
		b.Errorf("%d of %d machines failed to boot: %v", r.Failed, stormClients, r.Errors)
	}
	return r
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
