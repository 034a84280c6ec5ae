package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// fakeNow is a clock the tests move.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeNow) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeNow) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestBound(burst int, refill time.Duration, max int) (*failureBound, *fakeNow, *strings.Builder) {
	clock := &fakeNow{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var log strings.Builder
	return newFailureBound(FailureLimits{Burst: burst, Refill: refill}, max, clock.now,
		slog.New(slog.NewTextHandler(&log, nil))), clock, &log
}

func source(t *testing.T, addr string) netip.Prefix {
	t.Helper()
	src, ok := sourceOf(&http.Request{RemoteAddr: addr})
	if !ok {
		t.Fatalf("no source for %q", addr)
	}
	return src
}

// fail is a call from src whose check fails: its refusal, or nothing once its check took
// a failure and failed.
func fail(f *failureBound, src netip.Prefix) (retryAfter int, err error) {
	b, retryAfter, err := f.take(context.Background(), src, bearerHint)
	if err == nil {
		f.settle(b, true)
	}
	return retryAfter, err
}

// hold takes n failures from src's bucket, as n checks under way, and returns them.
func hold(t *testing.T, f *failureBound, src netip.Prefix, n int) []*bucket {
	t.Helper()
	var under []*bucket
	for range n {
		b, _, err := f.take(context.Background(), src, bearerHint)
		if err != nil {
			t.Fatal(err)
		}
		under = append(under, b)
	}
	return under
}

// untilPending waits until src has checking checks under way and waiting calls waiting.
func untilPending(t *testing.T, f *failureBound, src netip.Prefix, checking, waiting int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a guard against a hang, not a measure
	for c, w := f.pending(src); c != checking || w != waiting; c, w = f.pending(src) {
		if time.Now().After(deadline) {
			t.Fatalf("%d checks under way and %d calls waiting, want %d and %d", c, w, checking, waiting)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFailureBoundRefusesWithRetryAfter: a source has its burst of failed checks, then
// is refused UNAVAILABLE (source-failures) with the seconds until it regains one; once
// they have passed it is served again, one check for each refill. Another source is
// not touched.
func TestFailureBoundRefusesWithRetryAfter(t *testing.T) {
	f, clock, log := newTestBound(3, 2*time.Second, 100)
	stranger, operator := source(t, "127.0.0.2:5000"), source(t, "127.0.0.1:5000")
	for i := range 3 {
		if _, err := fail(f, stranger); err != nil {
			t.Fatalf("failure %d within the burst: %v", i+1, err)
		}
	}
	wait, err := fail(f, stranger)
	if e := proto.AsError(err); err == nil || e.Code != proto.Unavailable || e.Details.Reason != proto.ReasonSourceFailures || wait != 2 {
		t.Fatalf("beyond the burst: wait %d, %v", wait, err)
	}
	if !strings.Contains(err.Error(), "127.0.0.2") || !strings.Contains(err.Error(), "Try again in 2 s") {
		t.Errorf("the refusal does not say whose and when: %v", err)
	}
	if _, err := fail(f, operator); err != nil {
		t.Errorf("another source: %v", err)
	}
	clock.add(1500 * time.Millisecond)
	if wait, err := fail(f, stranger); err == nil || wait != 1 {
		t.Errorf("half a second before it regains one: wait %d, %v", wait, err)
	}
	clock.add(500 * time.Millisecond)
	if _, err := fail(f, stranger); err != nil {
		t.Errorf("after the Retry-After: %v", err)
	}
	if _, err := fail(f, stranger); err == nil {
		t.Errorf("a second check after one refill was taken")
	}
	if n := strings.Count(log.String(), "too many failed credential checks"); n != 1 {
		t.Errorf("%d log lines for the source's refusals within a minute, want 1:\n%s", n, log)
	}
	clock.add(time.Minute)
	for range 4 {
		fail(f, stranger)
	}
	if n := strings.Count(log.String(), "source=127.0.0.2"); n != 2 || !strings.Contains(log.String(), "refused=3") {
		t.Errorf("%d log lines after a minute, want 2, the second counting the 3 refusals since the first:\n%s", n, log)
	}
}

// TestFailureBoundSuccessesCostNothing: checks that do not fail give their failure back,
// so a source whose calls all succeed is never refused; checks under way at once never
// take more than the burst: a fourth call while three are under way waits, and leaves
// nothing behind when it is cancelled.
func TestFailureBoundSuccessesCostNothing(t *testing.T) {
	f, _, _ := newTestBound(3, time.Hour, 100)
	src := source(t, "127.0.0.1:1")
	ctx := context.Background()
	for i := range 1000 {
		b, _, err := f.take(ctx, src, bearerHint)
		if err != nil {
			t.Fatalf("call %d, every earlier one valid: %v", i, err)
		}
		f.settle(b, false)
	}
	under := hold(t, f, src, 3)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, wait, err := f.take(cancelled, src, bearerHint)
	if e := proto.AsError(err); err == nil || e.Code != proto.Unavailable || e.Details.Reason != "" || wait != 0 || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("a fourth call, cancelled, while three checks are under way: Retry-After %d, %v", wait, err)
	}
	if c, w := f.pending(src); c != 3 || w != 0 {
		t.Errorf("after the cancelled call: %d checks under way, %d calls waiting; want 3 and 0", c, w)
	}
	f.settle(under[0], false)
	if b, _, err := f.take(ctx, src, bearerHint); err != nil {
		t.Errorf("after one of them succeeded: %v", err)
	} else {
		f.settle(b, true)
	}
	f.settle(under[1], true)
	f.settle(under[2], true)
	if _, _, err := f.take(ctx, src, bearerHint); proto.AsError(err).Details.Reason != proto.ReasonSourceFailures {
		t.Errorf("after three failures of a burst of 3, none under way: %v", err)
	}
}

// TestFailureBoundWaitersSeeHowChecksEnd, as the attacker and the operator behind one
// address: calls finding the bucket empty while checks are under way wait; a check that
// succeeds lets one of them in, and once the checks under way all failed, the rest are
// refused source-failures, none let in beyond the burst. Past MaxFailureWaiters a call is
// refused at once, source-busy. A ctx ending frees its waiter.
func TestFailureBoundWaitersSeeHowChecksEnd(t *testing.T) {
	f, _, _ := newTestBound(3, time.Hour, 100)
	f.waiters = 6
	src := source(t, "192.0.2.1:1")
	ctx := context.Background()
	under := hold(t, f, src, 3)
	type result struct {
		b   *bucket
		err error
	}
	results := make(chan result)
	for range 5 {
		go func() {
			b, _, err := f.take(ctx, src, bearerHint)
			results <- result{b, err}
		}()
	}
	untilPending(t, f, src, 3, 5)
	gone, cancel := context.WithCancel(ctx)
	go func() {
		_, _, err := f.take(gone, src, bearerHint)
		results <- result{nil, err}
	}()
	untilPending(t, f, src, 3, 6)
	if _, wait, err := f.take(ctx, src, bearerHint); err == nil || wait != 1 || proto.AsError(err).Details.Reason != proto.ReasonSourceBusy || !strings.Contains(err.Error(), "6 calls from 192.0.2.1 are waiting") {
		t.Errorf("a call past the waiters' bound: Retry-After %d, %v", wait, err)
	}
	cancel()
	if r := <-results; r.err == nil || !strings.Contains(r.err.Error(), "context canceled") {
		t.Errorf("the cancelled waiter: %v", r.err)
	}
	untilPending(t, f, src, 3, 5)

	f.settle(under[0], false) // one success: one waiter gets its failure
	r := <-results
	if r.err != nil {
		t.Fatalf("a waiter after a success: %v", r.err)
	}
	untilPending(t, f, src, 3, 4)
	f.settle(under[1], true)
	f.settle(under[2], true)
	f.settle(r.b, true) // every check under way failed: the bucket is spent
	for range 4 {
		if r := <-results; proto.AsError(r.err).Details.Reason != proto.ReasonSourceFailures {
			t.Errorf("a waiter once every check failed: %v", r.err)
		}
	}
	if c, w := f.pending(src); c != 0 || w != 0 {
		t.Errorf("%d checks under way and %d calls waiting at the end", c, w)
	}
}

// TestFailureBoundAllowTakesOnlyWhatFails: a call allow lets in takes nothing until it
// is charged, so a source whose calls all succeed is never refused, whatever number are
// under way at once; once its failures are charged it is refused as take refuses, and
// calls let in at once with one failure left are all charged, the source then waiting
// for each of them.
func TestFailureBoundAllowTakesOnlyWhatFails(t *testing.T) {
	f, clock, _ := newTestBound(3, time.Second, 100)
	src := source(t, "127.0.0.3:1")
	for i := range 100 {
		if _, err := f.allow(context.Background(), src, joinHint); err != nil {
			t.Fatalf("call %d, 99 under way and none failed: %v", i+1, err)
		}
	}
	for i := range 2 {
		f.charge(src)
		if _, err := f.allow(context.Background(), src, joinHint); err != nil {
			t.Fatalf("after %d failures of a burst of 3: %v", i+1, err)
		}
	}
	for range 5 { // all let in at once, with one failure left
		f.charge(src)
	}
	wait, err := f.allow(context.Background(), src, joinHint)
	if e := proto.AsError(err); err == nil || e.Details.Reason != proto.ReasonSourceFailures || wait != 5 ||
		!strings.Contains(err.Error(), "join token that is valid") {
		t.Fatalf("four failures below empty: wait %d, %v", wait, err)
	}
	if _, _, err := f.take(context.Background(), src, bearerHint); err == nil {
		t.Errorf("a bearer credential from the same source was let in")
	}
	clock.add(5 * time.Second)
	if _, err := f.allow(context.Background(), src, joinHint); err != nil {
		t.Errorf("after the Retry-After: %v", err)
	}
}

// TestSourceOf: an IPv4 address is its own source, whether or not mapped into IPv6; an
// IPv6 address is its /64, whatever its zone; a request without a network address has
// none.
func TestSourceOf(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:443":                     "192.0.2.7/32",
		"[::ffff:192.0.2.7]:443":            "192.0.2.7/32",
		"[2001:db8:1:2:aaaa::1]:443":        "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:ffff::9]:80":    "2001:db8:1:2::/64",
		"[fe80::1%eth0]:80":                 "fe80::/64",
		"[2001:db8:1:3::1]:443":             "2001:db8:1:3::/64",
		"[::1]:7443":                        "::/64",
		"127.0.0.1:7443":                    "127.0.0.1/32",
		"[2001:db8:1:2:1:2:3:4%ens3]:65535": "2001:db8:1:2::/64",
	} {
		if got := source(t, addr).String(); got != want {
			t.Errorf("%s: %s, want %s", addr, got, want)
		}
	}
	for _, addr := range []string{"", "@", "pipe", "127.0.0.1"} {
		if src, ok := sourceOf(&http.Request{RemoteAddr: addr}); ok {
			t.Errorf("%q has source %s", addr, src)
		}
	}
}

// TestFailureBoundForgetsWithinItsBound: a stranger failing from ever more addresses never
// makes the bound remember more than its most sources. Sources whose buckets are full again
// go first, so one still refused stays refused while new sources come; only when the
// remembered ones are all short of their burst does the one whose last call is oldest go.
func TestFailureBoundForgetsWithinItsBound(t *testing.T) {
	const most = 100
	f, clock, _ := newTestBound(3, time.Second, most)
	refused := source(t, "198.51.100.1:1")
	for i := range most - 1 {
		fail(f, source(t, fmt.Sprintf("10.0.0.%d:1", i)))
	}
	for range 4 {
		fail(f, refused)
	}
	clock.add(time.Second) // the others are full again, the refused one is not
	for i := range 50 {
		fail(f, source(t, fmt.Sprintf("[2001:db8:%x::1]:1", i)))
	}
	if n := f.remembered(); n != 51 {
		t.Errorf("%d sources remembered, want the 50 new and the refused one", n)
	}
	fail(f, refused) // the one it regained
	if _, err := fail(f, refused); err == nil {
		t.Errorf("the refused source was forgotten while full buckets went")
	}
	for i := range 10 * most {
		fail(f, source(t, fmt.Sprintf("172.16.%d.%d:1", i/256, i%256)))
		if n := f.remembered(); n > most {
			t.Fatalf("%d sources remembered after %d new ones, at most %d", n, i+1, most)
		}
	}
	if n := f.remembered(); n != most {
		t.Errorf("%d sources remembered, want %d", n, most)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.order.Len() != len(f.sources) {
		t.Errorf("the order holds %d sources, the map %d", f.order.Len(), len(f.sources))
	}
}

// FuzzSourceOf: whatever a request's remote address holds, its source is none, or an
// IPv4 address whole or an IPv6 /64, masked, without a zone.
func FuzzSourceOf(f *testing.F) {
	for _, seed := range []string{"192.0.2.7:443", "[::ffff:192.0.2.7]:1", "[fe80::1%eth0]:80", "[2001:db8::1]:0", "", "@", "1.2.3.4", "[::1]:99999"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, remote string) {
		src, ok := sourceOf(&http.Request{RemoteAddr: remote})
		if !ok {
			return
		}
		addr := src.Addr()
		if want := map[bool]int{true: 32, false: 64}[addr.Is4()]; src.Bits() != want || src.Masked() != src || addr.Zone() != "" || addr.Is4In6() {
			t.Errorf("%q: source %s", remote, src)
		}
	})
}

// remembered counts the sources remembered.
func (f *failureBound) remembered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sources)
}

// pending is the checks under way and the calls waiting of src.
func (f *failureBound) pending(src netip.Prefix) (checking, waiting int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	el := f.sources[src]
	if el == nil {
		return 0, 0
	}
	b := el.Value.(*bucket)
	return b.checking, b.waiting
}
