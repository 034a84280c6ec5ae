package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestAFloodingTenantWaitsItsTurn, as the attacker: beta holds the registry's one slot
// and has as many calls waiting as it may; every further call of beta's is refused
// UNAVAILABLE (tenant-busy) with Retry-After, before anything of it runs. acme's call,
// made during the flood, waits rather than being refused, and gets the next slot, before
// every one of beta's calls that were waiting when it came; all of them are answered
// in the end.
func TestAFloodingTenantWaitsItsTurn(t *testing.T) {
	st, s := serve(t)
	secrets := map[string]string{}
	storetest.Update(t, st, func(tx *store.Tx) error {
		for _, tenant := range []string{"acme", "beta"} {
			if _, err := tx.CreateTenant(tenant); err != nil {
				return err
			}
			_, secret, err := tx.CreateCredential(tenant, []string{ActionNodesRead}, time.Time{})
			if err != nil {
				return err
			}
			secrets[tenant] = secret
		}
		return nil
	})
	const waiting = 4
	s.Limit(Limits{Running: 1, Waiting: waiting})
	admitted, release := make(chan string), make(chan struct{})
	s.Register("test.hold", Method{Action: ActionNodesRead, Call: func(_ context.Context, c *Caller, _ []byte) (any, error) {
		admitted <- c.Tenant
		<-release
		return struct{}{}, nil
	}})
	obs := &admissions{}
	s.Observe(obs)
	srv := httptest.NewServer(s)
	defer srv.Close()

	var answered sync.WaitGroup
	answer := func(tenant string) {
		answered.Go(func() {
			if status, _, e := callAs(t, srv, secrets[tenant], "test.hold", "application/json", "{}"); status != http.StatusOK {
				t.Errorf("a call of %s that waited its turn: %d %+v", tenant, status, e)
			}
		})
	}
	answer("beta")
	<-admitted // beta holds the one slot
	for i := range waiting {
		answer("beta")
		s.admission.untilQueued(t, i+1)
	}

	var flood sync.WaitGroup
	for range 50 {
		flood.Go(func() {
			status, retry, e := callAs(t, srv, secrets["beta"], "test.hold", "application/json", "{}")
			if status != http.StatusServiceUnavailable || e.Code != proto.Unavailable || e.Details.Reason != proto.ReasonTenantBusy || retry != "1" {
				t.Errorf("beta's call beyond its bound: %d, Retry-After %q, %+v", status, retry, e)
			}
		})
	}
	flood.Wait()

	answer("acme")
	s.admission.untilQueued(t, waiting+1)
	var order []string
	for range waiting + 1 {
		release <- struct{}{}
		order = append(order, <-admitted)
	}
	release <- struct{}{}
	answered.Wait()
	if order[0] != "acme" {
		t.Errorf("the slots went to %v: acme's call waited behind beta's", order)
	}
	s.admission.empty(t, "the flood")
	if obs.queued.Load() != waiting+1 || obs.busy.Load() != 50 {
		t.Errorf("the observer was told of %d calls queued and %d refused, want %d and 50", obs.queued.Load(), obs.busy.Load(), waiting+1)
	}
}

// admissions is an AdmissionObserver counting what it is told.
type admissions struct {
	seen
	queued, busy atomic.Int64
}

func (a *admissions) APIQueued(time.Duration) { a.queued.Add(1) }
func (a *admissions) APITenantBusy()          { a.busy.Add(1) }
