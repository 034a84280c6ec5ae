package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
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
	// benchBoots is how many times the VM boots the ramdisk: each boot times the peers
	// once, then wipes once.
	benchBoots = 5
)

// benchSpec is what BenchmarkVMWipe hands its helper.
type benchSpec struct {
	Work, Ramdisk, QMP, Console string
}

// benchPeers is the hook of the benchmark's extra initrd (benchmark only): on every
// boot of the ramdisk, before bcd starts, it times the peers of a quick wipe on the
// VM's three disks, each peer on the three at once as the wipe does: `dd if=/dev/zero`
// over the whole disk (direct, synced), then `blkdiscard` of the whole disk (which the
// dd filled), then an untimed dd again, so that the wipe finds each disk filled as
// blkdiscard did. Times come from /proc/uptime (10 ms).
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
echo BC-BENCH-BOOT
for peer in zero discard; do
	for d in $disks; do timed $peer $d & done
	wait
done
for d in $disks; do zero $d & done
wait
echo BC-BENCH-DONE
`

// benchWipeProfile boots the ramdisk unless it runs, wipes quick and powers off, so
// that the release after it boots the ramdisk again.
const benchWipeProfile = `{"id": "bench-wipe", "version": 1, "target": "metal", "role": "host",
  "steps": [
    {"use": "metal.ensureRamdisk", "timeout": "5m"},
    {"use": "disk.wipe", "on": "ramdisk", "with": {"mode": "quick"}, "timeout": "10m"},
    {"use": "power.setPower", "on": "site", "with": {"action": "off"}}],
  "cleanup": [{"use": "boot.cleanUp", "on": "site"}]}`

// BenchmarkVMWipe measures disk.wipe's quick mode on a qemu VM's NVMe, SATA and virtio
// disks (256 MiB each, files on the host) beside `blkdiscard` and `dd if=/dev/zero` of
// the same disks in the same run: the peers run in the same ramdisk on the same
// devices, from the hook of an extra initrd the pool names (policy.ramdiskExtras), just
// before each wipe. The VM boots the ramdisk five times (a deploy of a profile that
// wipes and powers off, then a release, alternately), and each boot gives one pair per
// disk and peer: the ratio of the peer's time to the wipe's time for that disk. It
// reports the median of the pairwise ratios with their minimum and maximum.
func BenchmarkVMWipe(b *testing.B) {
	ramdisk, work, lan, siteNS := vmSegment(b)
	qmpSock := filepath.Join(work, "vm.qmp")
	_, console := startWipeVM(b, lan, work, qmpSock, benchDiskSize)
	out := runHelper(b, siteNS, "TestVMWipeBenchHelper", benchHelperEnv, work, console,
		benchSpec{Work: work, Ramdisk: ramdisk, QMP: qmpSock, Console: console}, 40*time.Minute)
	// PAIR <disk> <transport> <peer> <peer seconds> <wipe seconds>
	type key struct{ transport, peer string }
	pairs := map[key][][2]float64{}
	for _, m := range regexp.MustCompile(`(?m)^PAIR (\S+) (\S+) (\S+) ([0-9.]+) ([0-9.]+)$`).FindAllStringSubmatch(out, -1) {
		peer, _ := strconv.ParseFloat(m[4], 64)
		ours, _ := strconv.ParseFloat(m[5], 64)
		k := key{m[2], m[3]}
		pairs[k] = append(pairs[k], [2]float64{peer, ours})
	}
	for _, tr := range []string{"nvme", "sata", "virtio"} {
		b.Run(tr, func(b *testing.B) {
			var wipe []float64
			var summary []string
			perBoot := make([]string, len(pairs[key{tr, "discard"}]))
			for i, p := range pairs[key{tr, "discard"}] {
				perBoot[i] = fmt.Sprintf("%.2f/%.2f", p[1], p[0])
				if z := pairs[key{tr, "zero"}]; i < len(z) {
					perBoot[i] += fmt.Sprintf("/%.2f", z[i][0])
				}
			}
			for _, peer := range []string{"discard", "zero"} {
				ps := pairs[key{tr, peer}]
				if len(ps) == 0 {
					b.Fatalf("no %s pairs for the %s disk:\n%s", peer, tr, out)
				}
				var ratios, times []float64
				for _, p := range ps {
					ratios = append(ratios, p[0]/p[1])
					times = append(times, p[0])
					if peer == "discard" {
						wipe = append(wipe, p[1])
					}
				}
				name := map[string]string{"discard": "blkdiscard", "zero": "dd"}[peer]
				b.ReportMetric(benchDiskSize/median(times)/1e6, name+"-MB/s")
				b.ReportMetric(median(ratios), "x-"+name)
				b.ReportMetric(slices.Min(ratios), "x-"+name+"-min")
				b.ReportMetric(slices.Max(ratios), "x-"+name+"-max")
				summary = append(summary, fmt.Sprintf("%s %.2fs: ratio %.2f (%.2f-%.2f)", name, median(times), median(ratios), slices.Min(ratios), slices.Max(ratios)))
			}
			b.ReportMetric(benchDiskSize/median(wipe)/1e6, "wipe-MB/s")
			b.Logf("%s disk, %d MiB, %d boots: quick wipe %.2fs; %s (the peer's time over the wipe's, median of the pairs, min-max); per boot, wipe/blkdiscard/dd: %s",
				tr, benchDiskSize>>20, len(wipe), median(wipe), strings.Join(summary, "; "), strings.Join(perBoot, " "))
		})
	}
}

// median is the middle of xs (the mean of the two middle ones for an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// TestVMWipeBenchHelper is the site side of BenchmarkVMWipe, in the site's namespace:
// the peers' extra initrd, the registry, bcd site, the boots and the wipes. After each
// wipe it prints a PAIR line per disk and peer: the peer's time on that boot and the
// wipe's time on that disk.
func TestVMWipeBenchHelper(t *testing.T) {
	var s benchSpec
	work := helperSpec(t, benchHelperEnv, &s)
	extra := cpioGz(t, map[string]string{"etc/ramdisk.d/50-bench-peers": benchPeers})
	admin, _, node := extraSite(t, work, s.Ramdisk, s.QMP, "bench-peers@1", extra, true, benchWipeProfile)
	peerLine := regexp.MustCompile(`BC-BENCH (\S+) (zero|discard) ([0-9.]+|failed)`)
	for boot := range benchBoots {
		args := []string{"nodes", "deploy", node, "--profile", "bench-wipe", "--wait"}
		if boot%2 == 1 {
			args = []string{"nodes", "release", node, "--wipe", "quick", "--wait"}
		}
		if res := testkit.CLI(t, admin, args...); res.Code != 0 {
			t.Fatalf("%s: exit %d\n%s", strings.Join(args[:2], " "), res.Code, res.Stderr)
		}
		var w attest.Wipe
		if err := stepResult(t, admin, node, proto.CommandDiskWipe, &w); err != nil || !w.Attested {
			t.Fatalf("boot %d: the wipe is not attested (%v): %+v", boot, err, w)
		}
		c, err := os.ReadFile(s.Console)
		if err != nil {
			t.Fatal(err)
		}
		boots := strings.Split(string(c), "BC-BENCH-BOOT")
		if len(boots) != boot+2 {
			t.Fatalf("boot %d: the console shows the peers' hook %d times", boot, len(boots)-1)
		}
		peers := map[string]string{}
		for _, m := range peerLine.FindAllStringSubmatch(boots[boot+1], -1) {
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
				fmt.Printf("PAIR %s %s %s %s %.3f\n", d.Name, d.Transport, peer, took, ours.Seconds())
			}
		}
	}
	fmt.Println("HELPER-OK")
}
