package replicas

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// TestAcknowledgedWritesSurviveKills: a load generator creates tenants through all three
// replicas at once; once 100 writes are acknowledged, replica 1 is killed with SIGKILL
// and one etcd member with it; the load goes on through the other two until 200 more
// are acknowledged. A checker then reads the tenants back through each replica left:
// every write that got an answer is there (a write that got an error may be or not).
// No write is answered INTERNAL: a commit whose answer the lost member took with it is
// UNAVAILABLE (read back, then try again).
func TestAcknowledgedWritesSurviveKills(t *testing.T) {
	const callers, before, after = 12, 100, 200
	f := startFleet(t)
	clients := make([]*api.Client, len(f.reg))
	for i, r := range f.reg {
		clients[i] = testkit.Client(t, r.AdminConfig)
	}
	var (
		mu       sync.Mutex
		acked    []string
		ackedBy  [3]int
		failed   atomic.Int64
		killed   atomic.Bool
		afterAck atomic.Int64
		next     atomic.Int64
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kill := make(chan struct{})
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for ctx.Err() == nil && afterAck.Load() < after {
				name := fmt.Sprintf("load-%d", next.Add(1))
				i := c % len(clients)
				callCtx, done := context.WithTimeout(ctx, 15*time.Second)
				err := clients[i].Call(callCtx, "tenants.create", api.CreateTenantRequest{Name: name}, &api.Tenant{})
				done()
				if err != nil {
					if failed.Add(1) <= 5 {
						t.Logf("replica %d: %v", i+1, err)
					}
					if proto.CodeOf(err) == proto.Internal {
						t.Errorf("replica %d answered a write with %v; a member or replica lost is UNAVAILABLE, not a fault of the registry", i+1, err)
					}
					if i == 0 && killed.Load() {
						c++ // the first replica is gone: this caller moves on to another
					}
					continue
				}
				mu.Lock()
				acked = append(acked, name)
				ackedBy[i]++
				n := len(acked)
				mu.Unlock()
				if killed.Load() {
					afterAck.Add(1)
				}
				if n == before {
					close(kill)
				}
			}
		})
	}
	<-kill
	killed.Store(true)
	f.reg[0].Kill()
	f.cluster.Kill(2)
	wg.Wait()
	if got := afterAck.Load(); got < after {
		t.Fatalf("%d writes acknowledged after replica 1 and an etcd member were killed, want %d (%d errors)", got, after, failed.Load())
	}
	t.Logf("%d writes acknowledged (by replica: %v), %d errors", len(acked), ackedBy, failed.Load())
	for i, r := range f.reg[1:] {
		have := tenants(t, r)
		var missing []string
		for _, name := range acked {
			if !slices.Contains(have, name) {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			t.Errorf("replica %d has lost %d acknowledged writes: %v", i+2, len(missing), missing)
		}
	}
}
