package cli_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/testkit"
)

// BenchmarkAPI measures the HTTPS API's writes (tenants.create: one transaction each)
// and reads (tenants.list of 20) per second, 32 callers at once, of one registry on
// bbolt and of three replicas on a three-member etcd cluster (the callers spread over
// the three), all on the same machine, and reports each and the ratios (three replicas
// over bbolt).
func BenchmarkAPI(b *testing.B) {
	const writes, reads, callers = 2000, 4000, 32
	cluster := etcdtest.Start(b)
	backends := []struct {
		name string
		regs []*testkit.Registry
	}{
		{"bbolt", []*testkit.Registry{testkit.StartRegistry(b, "")}},
		{"etcd3", testkit.StartReplicas(b, cluster.Endpoints, 3, nil)},
	}
	writeRates, readRates := make([]float64, len(backends)), make([]float64, len(backends))
	for i := range b.N {
		for j, be := range backends {
			var clients []*api.Client
			for _, r := range be.regs {
				clients = append(clients, testkit.Client(b, r.AdminConfig))
			}
			writeRates[j] += rate(b, be.name, clients, writes, callers, func(c *api.Client, n int64) error {
				return c.Call(context.Background(), "tenants.create", api.CreateTenantRequest{Name: fmt.Sprintf("t%d-%d", i, n)}, &api.Tenant{})
			})
			readRates[j] += rate(b, be.name, clients, reads, callers, func(c *api.Client, _ int64) error {
				return c.Call(context.Background(), "tenants.list", api.ListRequest{Limit: 20}, &api.TenantList{})
			})
		}
	}
	for j, be := range backends {
		b.ReportMetric(writeRates[j]/float64(b.N), be.name+"-writes/s")
		b.ReportMetric(readRates[j]/float64(b.N), be.name+"-reads/s")
	}
	b.ReportMetric(writeRates[1]/writeRates[0], "etcd3/bbolt-writes")
	b.ReportMetric(readRates[1]/readRates[0], "etcd3/bbolt-reads")
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
