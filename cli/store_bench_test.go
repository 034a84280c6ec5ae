package cli_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/testkit"
)

// BenchmarkAPIWrites measures API writes per second (tenants.create: one transaction
// each, 32 callers at once) of a registry on bbolt and of one on a three-member etcd
// cluster on the same machine, and reports both and their ratio (etcd over bbolt).
func BenchmarkAPIWrites(b *testing.B) {
	const writes, callers = 2000, 32
	cluster := etcdtest.Start(b)
	backends := []struct {
		name string
		reg  *testkit.Registry
	}{
		{"bbolt", testkit.StartRegistry(b, "")},
		{"etcd", testkit.StartRegistry(b, "", "--store", "etcd", "--etcd-endpoints", strings.Join(cluster.Endpoints, ","),
			"--kek-file", filepath.Join(b.TempDir(), "kek"))},
	}
	rates := make([]float64, len(backends))
	for i := range b.N {
		for j, be := range backends {
			client := testkit.Client(b, be.reg.AdminConfig)
			var next atomic.Int64
			var failed atomic.Value
			start := time.Now()
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for n := next.Add(1); n <= writes; n = next.Add(1) {
						var out api.Tenant
						if err := client.Call(context.Background(), "tenants.create", api.CreateTenantRequest{Name: fmt.Sprintf("t%d-%d", i, n)}, &out); err != nil {
							failed.Store(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatalf("%s: %v", be.name, err)
			}
			rates[j] += writes / time.Since(start).Seconds()
		}
	}
	for j, be := range backends {
		b.ReportMetric(rates[j]/float64(b.N), be.name+"-writes/s")
	}
	b.ReportMetric(rates[1]/rates[0], "etcd/bbolt")
}
