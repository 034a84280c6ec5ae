package cli_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/testkit"
)

// BenchmarkAPI measures the HTTPS API's writes (tenants.create: one transaction each)
// and reads (tenants.list of 20) per second, 32 callers at once, each with a client
// (connections) of its own, of one registry on bbolt and of three replicas on a
// three-member etcd cluster (the callers spread over the three), all on the same machine, in PairRounds alternating rounds (bbolt first in
// even rounds, the replicas first in odd ones), and reports the median ratios (three
// replicas over bbolt) with their minimum and maximum. It also reports the CPU time each
// kind of process spent per request, summed over the rounds (/proc/PID/stat): the bbolt
// registry, the replicas (summed), the etcd members (summed) and the callers (this
// process); and from each round's a projection, not a measurement: the ratios if each
// replica and its etcd member had a machine of their own with as many cores as this one.
func BenchmarkAPI(b *testing.B) {
	const writes, reads, callers = 2000, 4000, 32
	cluster := etcdtest.Start(b)
	backends := []struct {
		name    string
		regs    []*testkit.Registry
		members []int // the etcd members' pids, whose CPU counts for this backend
	}{
		{"bbolt", []*testkit.Registry{testkit.StartRegistry(b, "")}, nil},
		{"etcd3", testkit.StartReplicas(b, cluster.Endpoints, 3, func(int) []string { return []string{"--metrics-listen", "127.0.0.1:0"} }), cluster.PIDs()},
	}
	rounds := testkit.PairRounds(b)
	// Per backend, each round's rates and CPU.
	writeRates, readRates := make([][]float64, len(backends)), make([][]float64, len(backends))
	writeCPU, readCPU := make([][]cpuUse, len(backends)), make([][]cpuUse, len(backends))
	created := 0
	// The replicas' barrier rounds (a linearizable read of the cluster each) in the
	// write phases and in the read phases.
	var writeRounds, readRounds float64
	for range b.N {
		for i := range rounds {
			order := []int{0, 1}
			if i%2 == 1 {
				order = []int{1, 0}
			}
			for _, j := range order {
				be := backends[j]
				// A client (its own connections) for each caller, as independent callers
				// have: one client shared by all would keep two connections idle and
				// close the rest after each call, so most calls would pay a new TLS
				// handshake at both ends.
				var clients []*api.Client
				for k := range callers {
					clients = append(clients, testkit.Client(b, be.regs[k%len(be.regs)].AdminConfig))
				}
				created++
				before, roundsBefore := sampleCPU(b, be.regs, be.members), barrierRounds(b, be.regs)
				writeRates[j] = append(writeRates[j], rate(b, be.name, clients, writes, callers, func(c *api.Client, n int64) error {
					return c.Call(context.Background(), "tenants.create", api.CreateTenantRequest{Name: fmt.Sprintf("t%d-%d", created, n)}, &api.Tenant{})
				}))
				mid, roundsMid := sampleCPU(b, be.regs, be.members), barrierRounds(b, be.regs)
				stopPerf := perfRecord(b, be.name, be.regs, be.members)
				readRates[j] = append(readRates[j], rate(b, be.name, clients, reads, callers, func(c *api.Client, _ int64) error {
					return c.Call(context.Background(), "tenants.list", api.ListRequest{Limit: 20}, &api.TenantList{})
				}))
				stopPerf()
				after := sampleCPU(b, be.regs, be.members)
				writeRounds += roundsMid - roundsBefore
				readRounds += barrierRounds(b, be.regs) - roundsMid
				var w, r cpuUse
				w.add(mid.since(before), writes)
				r.add(after.since(mid), reads)
				writeCPU[j], readCPU[j] = append(writeCPU[j], w), append(readCPU[j], r)
			}
		}
	}
	reportConflicts(b, backends[1].regs, b.N*rounds*writes)
	b.ReportMetric(writeRounds/float64(b.N*rounds*writes), "etcd3-barrier-rounds/write")
	b.ReportMetric(readRounds/float64(b.N*rounds*reads), "etcd3-barrier-rounds/read")
	for j, be := range backends {
		b.ReportMetric(testkit.Median(writeRates[j]), be.name+"-writes/s")
		b.ReportMetric(testkit.Median(readRates[j]), be.name+"-reads/s")
	}
	for _, k := range []struct {
		kind  string
		rates [][]float64
		use   [][]cpuUse
	}{{"write", writeRates, writeCPU}, {"read", readRates, readCPU}} {
		measured := testkit.PairsOf(k.rates[1], k.rates[0], testkit.OursOverPeer)
		measured.Report(b, "etcd3/bbolt-"+k.kind+"s-", "API "+k.kind+"s, three replicas on etcd over one registry on bbolt, same cores", "etcd3", "bbolt", k.kind+"s/s")
		var bbolt, etcd cpuUse
		var projected, bounded []float64
		for i := range k.use[0] {
			bbolt.sum(k.use[0][i])
			etcd.sum(k.use[1][i])
			p, q := projection(k.use[0][i], k.use[1][i])
			projected, bounded = append(projected, p), append(bounded, q)
		}
		b.ReportMetric(bbolt.perOp(bbolt.registries), "bbolt-registry-CPU-ms/"+k.kind)
		b.ReportMetric(bbolt.perOp(bbolt.callers), "bbolt-callers-CPU-ms/"+k.kind)
		b.ReportMetric(etcd.perOp(etcd.registries), "replica-CPU-ms/"+k.kind)
		b.ReportMetric(etcd.perOp(etcd.members), "etcd-CPU-ms/"+k.kind)
		b.ReportMetric(etcd.perOp(etcd.callers), "etcd3-callers-CPU-ms/"+k.kind)
		b.ReportMetric(testkit.Median(projected), "projected-etcd3/bbolt-"+k.kind+"s")
		cores := float64(runtime.NumCPU())
		b.Logf("PROJECTION from measured CPU, not a measurement (%ss): with each replica and its etcd member on a machine of its own of %.0f cores, "+
			"3 x %.0f cores / (replica %.2f + member %.2f CPU-ms per %s), against one bbolt registry's %.0f cores / %.2f CPU-ms per %s: "+
			"%.2fx (min %.2f, max %.2f) over %d rounds; %.2fx (min %.2f, max %.2f) if the busiest member bounds its machine",
			k.kind, cores, cores, etcd.perOp(etcd.registries), etcd.perOp(etcd.members), k.kind, cores, bbolt.perOp(bbolt.registries), k.kind,
			testkit.Median(projected), slices.Min(projected), slices.Max(projected), len(projected),
			testkit.Median(bounded), slices.Min(bounded), slices.Max(bounded))
	}
}

// reportConflicts reports the replicas' transactions run again per transaction
// committed and the API's writes (of writes in all) per transaction committed (how many
// calls a group commit took), and logs their conflicts by bucket and kind (their
// metrics, docs/operations.md).
func reportConflicts(b *testing.B, replicas []*testkit.Registry, writes int) {
	var commits, reruns float64
	by := map[string]float64{}
	for _, r := range replicas {
		samples, _ := testkit.Scrape(b, r.MetricsURL)
		for series, v := range samples {
			switch {
			case series == "better_compute_store_commits_total":
				commits += v
			case strings.HasPrefix(series, "better_compute_store_conflicts_total{"):
				by[strings.TrimPrefix(series, "better_compute_store_conflicts_total")] += v
				reruns += v
			}
		}
	}
	b.Logf("replicas: %.0f transactions committed, %.0f run again %v", commits, reruns, by)
	b.ReportMetric(reruns/max(commits, 1), "etcd3-reruns/commit")
	b.ReportMetric(float64(writes)/max(commits, 1), "etcd3-writes/commit")
}

// barrierRounds is the barrier rounds regs sent to the etcd cluster so far, read from
// their metrics; 0 for registries that serve none (bbolt's, started without them).
func barrierRounds(b *testing.B, regs []*testkit.Registry) float64 {
	var n float64
	for _, r := range regs {
		if r.MetricsURL == "" {
			continue
		}
		samples, _ := testkit.Scrape(b, r.MetricsURL)
		n += samples["better_compute_store_barrier_rounds_total"]
	}
	return n
}

// projection is one round's ratio of three replicas over one bbolt registry if each
// replica and its etcd member had a machine of its own of this machine's cores, the
// callers on machines of their own and the load spread evenly over the three; and the
// same bounded by the busiest member (the leader does more than the others).
func projection(bbolt, etcd cpuUse) (even, busiest float64) {
	cores := float64(runtime.NumCPU())
	one := cores * 1000 / bbolt.perOp(bbolt.registries)
	three := 3 * cores * 1000 / (etcd.perOp(etcd.registries) + etcd.perOp(etcd.members))
	most := cores * 1000 / (etcd.perOp(etcd.registries)/3 + etcd.perOp(etcd.busiest))
	return three / one, most / one
}

// cpuSample is the CPU time used so far by one backend's processes.
type cpuSample struct {
	registries time.Duration   // the registry processes, summed
	members    []time.Duration // each etcd member
	callers    time.Duration   // this process, where the callers run
}

func sampleCPU(b testing.TB, regs []*testkit.Registry, members []int) cpuSample {
	s := cpuSample{callers: testkit.ProcessCPU(b, os.Getpid())}
	for _, r := range regs {
		s.registries += testkit.ProcessCPU(b, r.PID())
	}
	for _, pid := range members {
		s.members = append(s.members, testkit.ProcessCPU(b, pid))
	}
	return s
}

// since is the CPU time used between earlier and s.
func (s cpuSample) since(earlier cpuSample) cpuSample {
	d := cpuSample{registries: s.registries - earlier.registries, callers: s.callers - earlier.callers}
	for i := range s.members {
		d.members = append(d.members, s.members[i]-earlier.members[i])
	}
	return d
}

// cpuUse adds up the CPU time of a backend's runs of one kind of request.
type cpuUse struct {
	registries, members, busiest, callers time.Duration
	ops                                   int
}

// sum adds o's CPU and requests to u.
func (u *cpuUse) sum(o cpuUse) {
	u.registries += o.registries
	u.members += o.members
	u.busiest += o.busiest
	u.callers += o.callers
	u.ops += o.ops
}

func (u *cpuUse) add(d cpuSample, ops int) {
	u.registries += d.registries
	u.callers += d.callers
	var most time.Duration
	for _, m := range d.members {
		u.members += m
		most = max(most, m)
	}
	u.busiest += most
	u.ops += ops
}

// perOp is d in milliseconds per request.
func (u cpuUse) perOp(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond) / float64(u.ops)
}

// rate makes calls calls with callers callers at once, caller k through clients[k%len],
// and returns the calls per second.
func rate(b *testing.B, name string, clients []*api.Client, calls, callers int64, call func(*api.Client, int64) error) float64 {
	var next atomic.Int64
	var failed atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for k := range callers {
		c := clients[int(k)%len(clients)]
		wg.Go(func() {
			for n := next.Add(1); n <= calls; n = next.Add(1) {
				if err := call(c, n); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return float64(calls) / time.Since(start).Seconds()
}

// perfRecord starts `perf record` (call graphs) of the replicas' and the members'
// processes when BC_BENCH_PERF names a directory, writing reads-NANOS.data there, and
// returns what stops it; the bbolt side is not recorded.
func perfRecord(b *testing.B, name string, regs []*testkit.Registry, members []int) (stop func()) {
	dir := os.Getenv("BC_BENCH_PERF")
	if dir == "" || name == "bbolt" {
		return func() {}
	}
	var pids []string
	for _, r := range regs {
		pids = append(pids, fmt.Sprint(r.PID()))
	}
	for _, m := range members {
		pids = append(pids, fmt.Sprint(m))
	}
	cmd := exec.Command("perf", "record", "-F", "2000", "-g", "-o", filepath.Join(dir, fmt.Sprintf("reads-%d.data", time.Now().UnixNano())), "-p", strings.Join(pids, ","))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // perf attaches before the reads start
	return func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }
}
