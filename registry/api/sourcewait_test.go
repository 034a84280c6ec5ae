package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/better-compute/better-compute/proto/joinwire"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
	// The stalled cluster holds each check's read until the test resumes it. The
	// request timeout is past the tests' one-minute guards: at the default 10 s, on a
	// machine busy enough that the calls took longer to arrive, the first checks' reads
	// timed out and were answered UNAVAILABLE before the others were under way.
	st, err := store.OpenEtcd(store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t), Timeout: 2 * time.Minute}, store.Options{})
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
	// The signal is only queued when kill returns: a member's thread running on another
	// processor (or in a write to its disk) goes on until it takes it, and one answer it
	// sends meanwhile ends a check the test counts as held. Wait until every thread of
	// every member has stopped.
	deadline := time.Now().Add(time.Minute) // a guard against a hang, not a measure
	for _, pid := range pids {
		for !stopped(t, pid) {
			if time.Now().After(deadline) {
				t.Fatalf("etcd member %d has threads running a minute after SIGSTOP", pid)
			}
			time.Sleep(time.Millisecond)
		}
	}
	var once sync.Once
	resume = func() { once.Do(func() { signal(syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// stopped reports whether every thread of process pid is stopped (state T in
// /proc/PID/task/TID/stat).
func stopped(t *testing.T, pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of etcd member %d: %v", pid, err)
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			return false // a thread that ended between the glob and the read: look again
		}
		// The state follows the command's name, which ends at the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// untilArrived waits until n requests reached the server.
func (h *stallable) untilArrived(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a guard against a hang, not a measure
	for got := h.arrived.Load(); got < n; got = h.arrived.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests reached the server, want %d", got, n)
		}
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
	answered := h.validAtOnce(t, calls)
	h.untilArrived(t, calls)
	resume()
	answered()
}

// validAtOnce sends n valid calls at once; the returned function waits for them, fails
// t unless each was answered, and unless the store saw n valid checks, none failed and
// no call was refused source-failures.
func (h *stallable) validAtOnce(t *testing.T, n int) (wait func()) {
	var answered sync.WaitGroup
	for range n {
		answered.Go(func() {
			if status, retry, e := h.valid(t); status != http.StatusOK {
				t.Errorf("a valid call of %d at once from one address: %d, Retry-After %q, %+v", n, status, retry, e)
			}
		})
	}
	return func() {
		answered.Wait()
		if valid, failed, refused := h.obs.counts(); valid != n || failed != 0 || len(refused) != 0 {
			t.Errorf("%d valid checks, %d failed, %d calls refused source-failures; want %d, 0, 0", valid, failed, len(refused), n)
		}
	}
}

// bad is a call with a made-up credential, from the test's loopback address.
func (h *stallable) bad(t *testing.T) (int, string, proto.Error) {
	return callAs(t, h.srv, "bcc_made.up", "credentials.whoami", "application/json", "{}")
}

// untilPending waits until the test's address has checking checks under way and
// waiting calls waiting; when it fails, it says how many requests reached the server.
func (h *stallable) untilPending(t *testing.T, checking, waiting int) {
	t.Helper()
	defer func() {
		if t.Failed() { // on the way out of a Fatal too: how many calls got as far as the server
			t.Logf("%d requests had reached the server", h.arrived.Load())
		}
	}()
	untilPending(t, h.s.failures, source(t, "127.0.0.1:1"), checking, waiting)
}

// refusedForFailures reports whether an answer is the refusal of the bound of failed
// checks: 503, UNAVAILABLE source-failures, Retry-After the 3 s of the default refill.
func refusedForFailures(status int, retry string, e proto.Error) bool {
	return status == http.StatusServiceUnavailable && e.Code == proto.Unavailable && e.Details.Reason == proto.ReasonSourceFailures && retry == "3"
}

// TestAStrangersCallsAtOnceCostTheBurst, as the attacker: 200 calls at once from one
// address with made-up credentials, while the store is stalled so that they all arrive
// before any check ends: exactly the burst of 20 is checked, the other 180 wait for those
// and are refused source-failures with Retry-After once they failed. A valid call from
// the address is then refused too, until the bucket regains a failure.
func TestAStrangersCallsAtOnceCostTheBurst(t *testing.T) {
	h := newStallable(t)
	const calls, burst = 200, DefaultFailureBurst
	resume := h.stall(t)
	var refused atomic.Int64
	var done sync.WaitGroup
	for range calls {
		done.Go(func() {
			status, retry, e := h.bad(t)
			switch {
			case refusedForFailures(status, retry, e):
				refused.Add(1)
			case e.Code != proto.Unauthenticated:
				t.Errorf("a made-up credential: %d, Retry-After %q, %+v", status, retry, e)
			}
		})
	}
	h.untilPending(t, burst, calls-burst)
	resume()
	done.Wait()
	if valid, failed, seen := h.obs.counts(); valid != 0 || failed != burst || len(seen) != calls-burst || refused.Load() != calls-burst {
		t.Errorf("%d valid checks, %d failed, %d refusals observed and %d answered; want 0, %d, %d, %d", valid, failed, len(seen), refused.Load(), burst, calls-burst, calls-burst)
	}
	if status, retry, e := h.valid(t); !refusedForFailures(status, retry, e) {
		t.Errorf("a valid call once the burst is spent: %d, Retry-After %q, %+v", status, retry, e)
	}
	h.clock.add(DefaultFailureRefill)
	if status, _, e := h.valid(t); status != http.StatusOK {
		t.Errorf("a valid call after the Retry-After: %d %+v", status, e)
	}
	h.untilPending(t, 0, 0)
}

// TestValidCallsBesideAStrangersFlood, the operator behind the attacker's address: 20
// valid calls under way (the store stalled), then 150 made-up credentials and 30 more
// valid calls from the same address, all waiting. The rule: a call is refused
// source-failures only when its source's bucket is empty and no check from there is under
// way, which on a clock standing still is once 20 checks failed. So the made-up
// credentials cost exactly 20 checks, the 20 valid calls under way are answered, every
// other call is answered or refused source-failures, and no refusal comes before the
// 20th failure.
func TestValidCallsBesideAStrangersFlood(t *testing.T) {
	h := newStallable(t)
	const burst, flood, late = DefaultFailureBurst, 150, 30
	resume := h.stall(t)
	var first, others sync.WaitGroup
	var answered atomic.Int64
	valid := func(wg *sync.WaitGroup, must bool) {
		wg.Go(func() {
			status, retry, e := h.valid(t)
			switch {
			case status == http.StatusOK:
				answered.Add(1)
			case must || !refusedForFailures(status, retry, e):
				t.Errorf("a valid call beside the flood: %d, Retry-After %q, %+v", status, retry, e)
			}
		})
	}
	for range burst {
		valid(&first, true)
	}
	h.untilPending(t, burst, 0)
	for range flood {
		others.Go(func() {
			if status, retry, e := h.bad(t); e.Code != proto.Unauthenticated && !refusedForFailures(status, retry, e) {
				t.Errorf("a made-up credential: %d, Retry-After %q, %+v", status, retry, e)
			}
		})
	}
	h.untilPending(t, burst, flood)
	for range late {
		valid(&others, false)
	}
	h.untilPending(t, burst, flood+late)
	resume()
	first.Wait()
	others.Wait()
	validChecks, failed, refusals := h.obs.counts()
	if failed != burst || validChecks != int(answered.Load()) || validChecks < burst || validChecks+failed+len(refusals) != burst+flood+late {
		t.Errorf("%d valid checks (%d answered), %d failed, %d refused; want %d failed, %d calls in all", validChecks, answered.Load(), failed, len(refusals), burst, burst+flood+late)
	}
	for _, before := range refusals {
		if before != burst {
			t.Fatalf("a call was refused source-failures after %d failed checks, before the bucket of %d was spent by failures", before, burst)
		}
	}
	h.untilPending(t, 0, 0)
}

// TestACancelledWaiterLeavesNothing: a call waiting for the checks under way from its
// address, whose client goes away, leaves no waiter behind; neither does a join waiting
// so (join.join's token bound shares the bucket); once the checks end the address has
// nothing under way and its calls are served.
func TestACancelledWaiterLeavesNothing(t *testing.T) {
	h := newStallable(t)
	j := &answeringJoiner{}
	h.s.RegisterJoin(j)
	resume := h.stall(t)
	var held sync.WaitGroup
	for range DefaultFailureBurst {
		held.Go(func() {
			if status, _, e := h.valid(t); status != http.StatusOK {
				t.Errorf("a call under way: %d %+v", status, e)
			}
		})
	}
	h.untilPending(t, DefaultFailureBurst, 0)

	// Without a body: the server learns that a client went away while a request's body
	// is unread only once it reads it.
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 2)
	for _, req := range []struct{ method, secret string }{{"credentials.whoami", h.secret}, {joinwire.JoinMethod, ""}} {
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+"/v1/"+req.method, http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/json")
		if req.secret != "" {
			r.Header.Set("Authorization", "Bearer "+req.secret)
		}
		go func() {
			resp, err := h.srv.Client().Do(r)
			if err == nil {
				resp.Body.Close()
			}
			gone <- err
		}()
	}
	h.untilPending(t, DefaultFailureBurst, 2)
	cancel()
	for range 2 {
		if err := <-gone; !errors.Is(err, context.Canceled) {
			t.Errorf("a call whose client went away: %v", err)
		}
	}
	h.untilPending(t, DefaultFailureBurst, 0)
	resume()
	held.Wait()
	h.untilPending(t, 0, 0)
	if status, _, e := joinAs(t, h.srv, "joins"); status != http.StatusOK || j.asked.Load() != 1 {
		t.Errorf("a join once the checks ended: %d %+v, the join asked %d times (the cancelled one must not be)", status, e, j.asked.Load())
	}
}

// TestCallsPastTheWaitersAreRefusedSourceBusy: while the store is stalled, an address's
// valid calls take the burst of checks and MaxFailureWaiters more wait for them; one more
// is refused UNAVAILABLE with reason source-busy and Retry-After 1, a refusal its client
// can tell from the bound of failures and send again, and not counted as one of those.
// Once the store is back every waiting call is answered.
func TestCallsPastTheWaitersAreRefusedSourceBusy(t *testing.T) {
	h := newStallable(t)
	const waiting = DefaultFailureBurst + MaxFailureWaiters
	resume := h.stall(t)
	answered := h.validAtOnce(t, waiting)
	h.untilPending(t, DefaultFailureBurst, MaxFailureWaiters)
	status, retry, e := h.valid(t)
	if status != http.StatusServiceUnavailable || e.Code != proto.Unavailable || e.Details.Reason != proto.ReasonSourceBusy || retry != "1" {
		t.Errorf("a call past the %d waiting: %d, Retry-After %q, %+v; want 503 UNAVAILABLE %s with Retry-After 1",
			MaxFailureWaiters, status, retry, e, proto.ReasonSourceBusy)
	}
	resume()
	answered()
}
