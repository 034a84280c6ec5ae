package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// checksSeen is a CredentialObserver recording, for each call refused source-failures,
// how many bearer checks had failed before it.
type checksSeen struct {
	seen
	mu                 sync.Mutex
	valid, failed      int
	refused            []int
	joinsRefused, join int
}

func (c *checksSeen) APICredentialChecked(credential string, valid bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case credential != CredentialBearer:
		c.join++
	case valid:
		c.valid++
	default:
		c.failed++
	}
}

func (c *checksSeen) APISourceRefused(credential string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if credential != CredentialBearer {
		c.joinsRefused++
		return
	}
	c.refused = append(c.refused, c.failed)
}

func (c *checksSeen) counts() (valid, failed int, refused []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.valid, c.failed, append([]int(nil), c.refused...)
}

// stallable is an API server over a store on an etcd cluster of its own, bounding failed
// checks at the defaults on a clock that stands still, with a credential of tenant acme:
// stalling the cluster (its members stopped) holds every credential check under way.
type stallable struct {
	s       *Server
	srv     *httptest.Server
	clock   *fakeNow
	obs     *checksSeen
	secret  string
	cluster *etcdtest.Cluster
	// arrived counts the requests that reached the server.
	arrived atomic.Int64
}

func newStallable(t *testing.T) *stallable {
	cluster := etcdtest.Start(t)
	st, err := store.OpenEtcd(store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t)}, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &stallable{cluster: cluster, clock: &fakeNow{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, obs: &checksSeen{}}
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if _, err = tx.CreateTenant("acme"); err != nil {
			return err
		}
		_, h.secret, err = tx.CreateCredential("acme", []string{ActionNodesRead}, time.Time{})
		return err
	})
	h.s = NewServer(st, slog.New(slog.DiscardHandler))
	h.s.RegisterAll()
	h.s.LimitFailures(FailureLimits{}, h.clock.now)
	h.s.Observe(h.obs)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.arrived.Add(1)
		h.s.ServeHTTP(w, r)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// stall stops the cluster's members until the returned function (or t's end) resumes
// them.
func (h *stallable) stall(t *testing.T) (resume func()) {
	pids := h.cluster.PIDs()
	signal := func(sig syscall.Signal) {
		for _, pid := range pids {
			if err := syscall.Kill(pid, sig); err != nil {
				t.Errorf("signal %v to etcd member %d: %v", sig, pid, err)
			}
		}
	}
	signal(syscall.SIGSTOP)
	var once sync.Once
	resume = func() { once.Do(func() { signal(syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// untilArrived waits until n requests reached the server.
func (h *stallable) untilArrived(n int64) {
	for h.arrived.Load() < n {
		time.Sleep(time.Millisecond)
	}
}

// valid is a call with acme's credential, from the test's loopback address.
func (h *stallable) valid(t *testing.T) (int, string, proto.Error) {
	return callAs(t, h.srv, h.secret, "credentials.whoami", "application/json", "{}")
}

// TestManyValidCallsAtOnceFromOneAddressAreAnswered, as an automation host or a NAT: 64
// calls at once from one address, every credential valid, while the store is slow (its
// cluster stalled), so that more checks are under way than the source's bucket of
// failures holds (20 by default): every call is answered, none refused source-failures.
func TestManyValidCallsAtOnceFromOneAddressAreAnswered(t *testing.T) {
	h := newStallable(t)
	const calls = 64
	resume := h.stall(t)
	var answered sync.WaitGroup
	for range calls {
		answered.Go(func() {
			if status, retry, e := h.valid(t); status != http.StatusOK {
				t.Errorf("a valid call of %d at once from one address: %d, Retry-After %q, %+v", calls, status, retry, e)
			}
		})
	}
	h.untilArrived(calls)
	resume()
	answered.Wait()
	if valid, failed, refused := h.obs.counts(); valid != calls || failed != 0 || len(refused) != 0 {
		t.Errorf("%d valid checks, %d failed, %d calls refused source-failures; want %d, 0, 0", valid, failed, len(refused), calls)
	}
}
