package vm

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/testkit"
)

const (
	// benchHelperEnv makes the test binary the site side of BenchmarkVMWipe.
	benchHelperEnv = "BC_VM_BENCH_HELPER"
	// benchDiskSize is each of the benchmark VM's disks.
	benchDiskSize = 256 << 20
	// benchGoAddr is where the helper tells a boot whose wipe ran first that it has
	// ended, so that the boot's peers run after it: an HTTP request it answers then.
	benchGoAddr = siteIP + ":7449"
)

// benchSpec is what BenchmarkVMWipe hands its helper.
type benchSpec struct {
	Work, Ramdisk, QMP, Console string
}

// benchPeers is the hook of the benchmark's extra initrd (benchmark only), a format
// whose %s is the helper's go address (benchGoAddr). On every boot of the ramdisk,
// before bcd starts, it readies the peers of a quick wipe on the VM's three disks, each
// peer on the three at once as the wipe does: `dd if=/dev/zero` over the whole disk
// (direct, synced), then `blkdiscard` of the whole disk (which the dd filled); and an
// untimed dd that fills the disks, so that the wipe finds each disk filled as
// blkdiscard did. Boots alternate which side runs first. A boot that finds no marker in
// vda fills the disks and leaves the peers to a job that waits until the helper says
// the wipe has ended (its go address answers, once the helper has resumed the VM the
// deploy powered off), stops bcd, so that nothing but the peers runs as before bcd
// started, runs them and leaves the marker. A boot that finds the marker runs the
// peers, then the fill, before bcd starts (the dd overwrites the marker, the wipe after
// it too). Times come from /proc/uptime (10 ms).
const benchPeers = `#!/bin/sh
disks="nvme0n1 sda vda"
for i in $(seq 30); do
	ok=1
	for d in $disks; do [ -b /dev/$d ] || ok=; done
	[ -n "$ok" ] && break
	sleep 1
done
up() { cut -d' ' -f1 /proc/uptime; }
zero() { dd if=/dev/zero of=/dev/$1 bs=1M count=$(( $(blockdev --getsize64 /dev/$1) / 1048576 )) oflag=direct conv=fsync 2>/dev/null; }
discard() { blkdiscard /dev/$1; }
timed() {
	t0=$(up)
	if $1 $2; then t1=$(up); echo "BC-BENCH $2 $1 $(awk "BEGIN { print $t1 - $t0 }")"; else echo "BC-BENCH $2 $1 failed"; fi
}
peers() {
	for peer in zero discard; do
		for d in $disks; do timed $peer $d & done
		wait
	done
}
fill() {
	for d in $disks; do zero $d & done
	wait
}
marker=BC-BENCH-PEERS-FIRST
at=262144
echo BC-BENCH-BOOT
if [ "$(dd if=/dev/vda bs=512 skip=$at count=1 2>/dev/null | tr -d '\000')" = "$marker" ]; then
	echo BC-BENCH-ORDER peer-first
	peers
	fill
	echo BC-BENCH-DONE
else
	echo BC-BENCH-ORDER wipe-first
	fill
	(
		until wget -q -O /dev/null http://%s/go; do sleep 1; done
		kill $(pidof bcd)
		while pidof bcd >/dev/null; do sleep 1; done
		peers
		printf %%s $marker | dd of=/dev/vda bs=512 seek=$at conv=notrunc,fsync 2>/dev/null
		echo BC-BENCH-DONE
	) &
fi
`

// benchWipeProfile boots the ramdisk unless it runs, wipes quick and powers off, so
// that the release after it boots the ramdisk again. The helper resumes the VM in
// between for the peers, which run after this wipe.
const benchWipeProfile = `{"id": "bench-wipe", "version": 1, "target": "metal", "role": "host",
  "steps": [
    {"use": "metal.ensureRamdisk", "timeout": "5m"},
    {"use": "disk.wipe", "on": "ramdisk", "with": {"mode": "quick"}, "timeout": "10m"},
    {"use": "power.setPower", "on": "site", "with": {"action": "off"}}],
  "cleanup": [{"use": "boot.cleanUp", "on": "site"}]}`

// BenchmarkVMWipe measures disk.wipe's quick mode on a qemu VM's NVMe, SATA and virtio
// disks (256 MiB each, files on the host) beside `blkdiscard` and `dd if=/dev/zero` of
// the same disks in the same run: the peers run in the same ramdisk on the same
// devices, from the hook of an extra initrd the pool names (policy.ramdiskExtras). The
// VM boots the ramdisk testkit.PairRounds times (a deploy of a profile that wipes, then
// a release, alternately), and each boot is a round that gives one pair per disk and
// peer, the wipe first in even rounds (the deploys) and the peers first in odd ones
// (the releases): the ratio of the peer's time to the wipe's time for that disk. It
// reports the median of the pairwise ratios with their minimum and maximum.
func BenchmarkVMWipe(b *testing.B) {
	ramdisk, work, lan, siteNS := vmSegment(b)
	qmpSock := filepath.Join(work, "vm.qmp")
	_, console := startWipeVM(b, lan, work, qmpSock, benchDiskSize, false)
	out := runHelper(b, siteNS, "TestVMWipeBenchHelper", benchHelperEnv, work, console,
		benchSpec{Work: work, Ramdisk: ramdisk, QMP: qmpSock, Console: console}, 40*time.Minute)
	// PAIR <disk> <transport> <peer> <peer seconds> <wipe seconds> <order>
	type key struct{ transport, peer string }
	type pair struct {
		peer, ours float64
		order      string
	}
	pairs := map[key][]pair{}
	for _, m := range regexp.MustCompile(`(?m)^PAIR (\S+) (\S+) (\S+) ([0-9.]+) ([0-9.]+) (\S+)$`).FindAllStringSubmatch(out, -1) {
		peer, _ := strconv.ParseFloat(m[4], 64)
		ours, _ := strconv.ParseFloat(m[5], 64)
		k := key{m[2], m[3]}
		pairs[k] = append(pairs[k], pair{peer, ours, m[6]})
	}
	for _, tr := range []string{"nvme", "sata", "virtio"} {
		b.Run(tr, func(b *testing.B) {
			var wipe []float64
			var summary []string
			perBoot := make([]string, len(pairs[key{tr, "discard"}]))
			for i, p := range pairs[key{tr, "discard"}] {
				perBoot[i] = fmt.Sprintf("%s %.2f/%.2f", p.order, p.ours, p.peer)
				if z := pairs[key{tr, "zero"}]; i < len(z) {
					perBoot[i] += fmt.Sprintf("/%.2f", z[i].peer)
				}
				wipe = append(wipe, p.ours)
			}
			for _, peer := range []string{"discard", "zero"} {
				ps := pairs[key{tr, peer}]
				if len(ps) == 0 {
					b.Fatalf("no %s pairs for the %s disk:\n%s", peer, tr, out)
				}
				var ours, times []float64
				for _, p := range ps {
					ours, times = append(ours, p.ours), append(times, p.peer)
				}
				name := map[string]string{"discard": "blkdiscard", "zero": "dd"}[peer]
				p := testkit.PairsOf(ours, times, testkit.PeerOverOurs)
				med, lo, hi := p.Spread()
				b.ReportMetric(benchDiskSize/testkit.Median(times)/1e6, name+"-MB/s")
				b.ReportMetric(med, "x-"+name)
				b.ReportMetric(lo, "x-"+name+"-min")
				b.ReportMetric(hi, "x-"+name+"-max")
				summary = append(summary, fmt.Sprintf("%s %.2fs: ratio %.2f (%.2f-%.2f)", name, testkit.Median(times), med, lo, hi))
			}
			b.ReportMetric(benchDiskSize/testkit.Median(wipe)/1e6, "wipe-MB/s")
			b.Logf("%s disk, %d MiB, %d boots: quick wipe %.2fs; %s (the peer's time over the wipe's, median of the pairs, min-max); per boot, which ran first and wipe/blkdiscard/dd: %s",
				tr, benchDiskSize>>20, len(wipe), testkit.Median(wipe), strings.Join(summary, "; "), strings.Join(perBoot, " "))
		})
	}
}

// TestVMWipeBenchHelper is the site side of BenchmarkVMWipe, in the site's namespace:
// the peers' extra initrd, the registry, bcd site, the boots and the wipes, and the go
// address of the boots whose wipe runs first (the deploys), for which it resumes the VM
// the deploy powered off and stops it again after the peers. After each boot it prints a PAIR line per
// disk and peer: the peer's time on that boot, the wipe's time on that disk, and which
// ran first.
func TestVMWipeBenchHelper(t *testing.T) {
	var s benchSpec
	work := helperSpec(t, benchHelperEnv, &s)
	var wipeEnded atomic.Pointer[chan struct{}]
	ln, err := net.Listen("tcp", benchGoAddr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		select {
		case <-*wipeEnded.Load():
		case <-r.Context().Done():
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	extra := cpioGz(t, map[string]string{"etc/ramdisk.d/50-bench-peers": fmt.Sprintf(benchPeers, benchGoAddr)})
	admin, _, node := extraSite(t, work, s.Ramdisk, s.QMP, "bench-peers@1", extra, true, benchWipeProfile)
	peerLine := regexp.MustCompile(`BC-BENCH (\S+) (zero|discard) ([0-9.]+|failed)`)
	for boot := range testkit.PairRounds(t) {
		ended := make(chan struct{})
		wipeEnded.Store(&ended)
		order, args := "wipe-first", []string{"nodes", "deploy", node, "--profile", "bench-wipe", "--wait"}
		if boot%2 == 1 {
			order, args = "peer-first", []string{"nodes", "release", node, "--wipe", "quick", "--wait"}
		}
		if res := testkit.CLI(t, admin, args...); res.Code != 0 {
			t.Fatalf("%s: exit %d\n%s", strings.Join(args[:2], " "), res.Code, res.Stderr)
		}
		if order == "wipe-first" {
			// The deploy's power off stopped the VM (qemu's stop) after the wipe: the
			// peers run while it goes on from there, and it stops again after them.
			qmpRun(t, s.QMP, "cont")
		}
		close(ended)
		var w attest.Wipe
		if err := stepResult(t, admin, node, proto.CommandDiskWipe, &w); err != nil || !w.Attested {
			t.Fatalf("boot %d: the wipe is not attested (%v): %+v", boot, err, w)
		}
		// The boot's peers are done.
		var this string
		for end := time.Now().Add(5 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			c, err := os.ReadFile(s.Console)
			if err != nil {
				t.Fatal(err)
			}
			boots := strings.Split(string(c), "BC-BENCH-BOOT")
			if len(boots) != boot+2 {
				t.Fatalf("boot %d: the console shows the peers' hook %d times", boot, len(boots)-1)
			}
			this = boots[boot+1]
			if strings.Contains(this, "BC-BENCH-DONE") {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("boot %d: the peers did not end:\n%s", boot, this)
			}
		}
		if !strings.Contains(this, "BC-BENCH-ORDER "+order) {
			t.Fatalf("boot %d: the hook did not run %s:\n%s", boot, order, this)
		}
		if order == "wipe-first" {
			qmpRun(t, s.QMP, "stop")
		}
		peers := map[string]string{}
		for _, m := range peerLine.FindAllStringSubmatch(this, -1) {
			peers[m[1]+" "+m[2]] = m[3]
		}
		for _, d := range w.Disks {
			ours, err := time.ParseDuration(d.Duration)
			if err != nil || !d.Wiped {
				t.Fatalf("boot %d: disk %s: wiped %t, duration %q", boot, d.Name, d.Wiped, d.Duration)
			}
			for _, peer := range []string{"zero", "discard"} {
				took, ok := peers[d.Name+" "+peer]
				if !ok || took == "failed" {
					t.Fatalf("boot %d: the peer %s on %s: %q", boot, peer, d.Name, took)
				}
				fmt.Printf("PAIR %s %s %s %s %.3f %s\n", d.Name, d.Transport, peer, took, ours.Seconds(), order)
			}
		}
	}
	fmt.Println("HELPER-OK")
}

// qmpRun runs command on the VM's QMP socket at sock behind the site's back: the
// benchmark resumes (cont) a VM the deploy powered off (stop), and stops it again.
func qmpRun(t *testing.T, sock, command string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	dec := json.NewDecoder(c)
	for _, cmd := range []string{"qmp_capabilities", command} {
		if _, err := fmt.Fprintf(c, "{\"execute\": %q}\n", cmd); err != nil {
			t.Fatal(err)
		}
		for {
			// The greeting and events have neither a return nor an error.
			var m struct{ Return, Error json.RawMessage }
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("QMP %s: %v", cmd, err)
			}
			if m.Error != nil {
				t.Fatalf("QMP %s: %s", cmd, m.Error)
			}
			if m.Return != nil {
				break
			}
		}
	}
}
