package hostconverge

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/hostconverge/k8s"
	"github.com/better-compute/better-compute/proto/hostunit"
	"github.com/better-compute/better-compute/testkit"
)

// convergedHost is a host on which all twelve units are converged: the files and program
// answers of each unit's converged case, with one kernel command line and one dpkg status
// that hold them all.
func convergedHost(tb testing.TB) (*fakeHost, Spec) {
	files := kernelHost()
	base := kernelHost()
	replies := map[string]reply{}
	var units []Unit
	cases := unitCases()
	for _, name := range hostunit.Order() {
		tc := cases[name+"/converged"]
		for name, content := range tc.files {
			if base[name] != content {
				files[name] = content
			}
		}
		maps.Copy(replies, tc.replies)
		units = append(units, Unit{Name: name, Settings: []byte(tc.settings)})
	}
	files = with(files, booted("hugepagesz=1G hugepages=16 isolcpus=2-3 nohz_full=2-3 rcu_nocbs=2-3 intel_iommu=on iommu=pt"))
	files = with(files, gpuHost("nvidia-driver-580-open=580.95.05-0ubuntu1", "nvidia-fabricmanager-580=580.95.05-0ubuntu1",
		"nvidia-container-toolkit=1.18.0-1", "kubelet=1.34.1-1.1", "kubeadm=1.34.1-1.1"))
	return newFakeHost(tb, files, replies), Spec{Generation: 1, Units: units}
}

func TestAllUnitsConverged(t *testing.T) {
	h, spec := convergedHost(t)
	before := h.snapshot()
	results := (&Converger{Root: h.root, Runner: h}).Converge(context.Background(), spec)
	if len(results) != 12 {
		t.Fatalf("%d results, want 12", len(results))
	}
	for _, r := range results {
		if r.Status != Converged {
			t.Errorf("%s: %s: %s", r.Unit, r.Status, r.Message)
		}
	}
	assertQuiet(t, results, h.takeCalls(), fileDiff(before, h.snapshot()))
}

// BenchmarkConvergedPass is one pass of all twelve units over a converged host (programs
// answered by the recording runner), the cost bcd pays every period; ns/op and the
// allocations are the pass's alone. Its peer is a blind pass that rewrites every file the
// units own atomically without reading anything first. The b.N passes are shared out over
// testkit.PairRounds rounds, each running as many blind passes beside them, alternately
// first; it reports the median of the within-round ratios of the blind pass's time to the
// converged pass's (above 1: the converged pass is cheaper), with their minimum and
// maximum, and logs each side's median time a pass.
func BenchmarkConvergedPass(b *testing.B) {
	h, spec := convergedHost(b)
	c := &Converger{Root: h.root, Runner: h}
	ctx := context.Background()
	owned := ownedFiles(b, h)
	want := testkit.PairRounds(b)
	rounds := min(want, b.N)
	// share is how many passes of each side round i runs: b.N in all.
	share := func(i int) int {
		if i < b.N%rounds {
			return b.N/rounds + 1
		}
		return b.N / rounds
	}
	var oi, pi int
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	p := testkit.RunPairs(rounds, testkit.PeerOverOurs, func() float64 {
		n := share(oi)
		oi++
		b.StartTimer()
		start := time.Now()
		for range n {
			c.Converge(ctx, spec)
			h.takeCalls()
		}
		el := time.Since(start)
		b.StopTimer()
		return el.Seconds() * 1e3 / float64(n)
	}, func() float64 {
		n := share(pi)
		pi++
		start := time.Now()
		for range n {
			for name, data := range owned {
				if err := fsutil.WriteFileAtomic(filepath.Join(h.root, name), data, 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
		return time.Since(start).Seconds() * 1e3 / float64(n)
	})
	if rounds < want {
		return // the framework's first run, of fewer passes than rounds, says nothing
	}
	p.Report(b, "", "blind rewrite/converged pass", "converged pass", "blind rewrite", "ms")
}

// ownedFiles returns the files of the converged host that the units write.
func ownedFiles(tb testing.TB, h *fakeHost) map[string][]byte {
	notOwned := []string{"/etc/default/grub", "/etc/os-release", k8s.KubeletConf}
	owned := map[string][]byte{}
	for name, content := range h.snapshot() {
		if (strings.HasPrefix(name, "/etc/") || strings.HasPrefix(name, "/var/lib/better-compute/")) && !slices.Contains(notOwned, name) {
			_, data, _ := strings.Cut(content, "\n")
			owned[name] = []byte(data)
		}
	}
	if len(owned) < 10 {
		tb.Fatalf("only %d owned files", len(owned))
	}
	return owned
}
