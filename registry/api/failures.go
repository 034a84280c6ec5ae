package api

import (
	"container/list"
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// FailureLimits bound the failed credential checks of each source address, so that a
// stranger sending made-up credentials (to the API, to the console's sign-in, or join
// tokens to join.join) costs the registry a bounded number of credential checks, store
// reads among them (docs/security.md, "What strangers can cost"). A source is an IPv4
// address, or the /64 of an IPv6 one. Each source holds one bucket of Burst failures, all
// three kinds of call together, that refills one every Refill; a call from a source whose
// bucket is empty is refused UNAVAILABLE (reason source-failures) with Retry-After before
// its credential is checked, valid or not. A check that succeeds costs nothing. A call
// that finds the bucket empty while checks of the same source are under way (each holds
// one of its failures until it ends) waits for them instead, so that many valid calls at
// once from one address are not refused: up to MaxFailureWaiters calls of a source wait
// at once, a further one is refused UNAVAILABLE (reason source-busy) with Retry-After 1 s.
type FailureLimits struct {
	// Burst is how many failed checks a source may have in a row. 0 is
	// DefaultFailureBurst.
	Burst int
	// Refill is how long a source takes to regain one failed check. 0 is
	// DefaultFailureRefill.
	Refill time.Duration
	// Off switches the bound off: every call's credential is checked.
	Off bool
}

// Defaults and ranges of FailureLimits, and the sources the bound remembers at once.
const (
	// DefaultFailureBurst lets an operator with a mistyped config try a few times and a
	// script with a revoked key run a few dozen calls before it is refused, and
	// DefaultFailureRefill lets such a script polling every few seconds fail for ever
	// without being refused, while a stranger costs one check every 3 s once its burst is
	// spent.
	DefaultFailureBurst  = 20
	DefaultFailureRefill = 3 * time.Second
	// MaxFailureBurst and the refill's range bound what an operator may set.
	MaxFailureBurst  = 10_000
	MinFailureRefill = 10 * time.Millisecond
	MaxFailureRefill = time.Hour
	// MaxFailureSources bounds the sources remembered: about 200 bytes each, 3 MiB in all.
	// One more forgets first the sources whose buckets are full again, then the one whose
	// last call is oldest.
	MaxFailureSources = 16_384
	// MaxFailureWaiters bounds the calls of one source waiting for the checks under way
	// of that source, each of which wakes them all when it ends.
	MaxFailureWaiters = 256
	// failureLogEvery is how often at most a source's refusals are logged.
	failureLogEvery = time.Minute
)

// withDefaults is l with every zero field its default.
func (l FailureLimits) withDefaults() FailureLimits {
	if l.Burst <= 0 {
		l.Burst = DefaultFailureBurst
	}
	if l.Refill <= 0 {
		l.Refill = DefaultFailureRefill
	}
	return l
}

// failureBound holds the bucket of each source with failed checks. A call takes a failure
// from its source's bucket before its check and gives it back when the check did not
// fail, so that calls under way at once never check more than the bucket holds; a call
// finding the bucket empty while some are under way waits until one ends.
type failureBound struct {
	limits FailureLimits
	max    int
	// waiters bounds the calls of one source waiting at once.
	waiters int
	now     func() time.Time
	log     *slog.Logger
	mu      sync.Mutex
	// sources holds each remembered source's element of order, whose oldest call is
	// first.
	sources map[netip.Prefix]*list.Element
	order   *list.List
}

// bucket is one source's: the failures it may still have as of when.
type bucket struct {
	source netip.Prefix
	tokens float64
	when   time.Time
	// refused counts the calls refused since the last log line, logged at logged.
	refused int
	logged  time.Time
	// checking counts the checks under way, each holding a failure taken from tokens
	// until it is settled; waiting the calls waiting for one of them to end, which
	// closes ended.
	checking, waiting int
	ended             chan struct{}
}

func newFailureBound(l FailureLimits, max int, now func() time.Time, log *slog.Logger) *failureBound {
	return &failureBound{limits: l.withDefaults(), max: max, waiters: MaxFailureWaiters, now: now, log: log,
		sources: map[netip.Prefix]*list.Element{}, order: list.New()}
}

// sourceOf is the source of a request's connection: its remote address, IPv4 whole and
// IPv6 as its /64. Never a header: the registry listens directly (no proxy in front says
// who its client is). A request without a network address (one made in-process without
// one, the admin socket's) has no source and is not bounded.
func sourceOf(r *http.Request) (netip.Prefix, bool) {
	addr, ok := remoteAddr(r)
	if !ok {
		return netip.Prefix{}, false
	}
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p, true
}

// remoteAddr is the address of a request's connection, IPv4 as IPv4 and without a zone;
// false for a request without a network address.
func remoteAddr(r *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), true
}

// refill brings b's tokens to now; f.mu is held.
func (f *failureBound) refill(b *bucket, now time.Time) {
	if gained := now.Sub(b.when).Seconds() / f.limits.Refill.Seconds(); gained > 0 {
		b.tokens = min(b.tokens+gained, float64(f.limits.Burst))
	}
	b.when = now
}

// full reports whether b holds its whole burst again as of now; f.mu is held.
func (f *failureBound) full(b *bucket, now time.Time) bool {
	return b.tokens+now.Sub(b.when).Seconds()/f.limits.Refill.Seconds() >= float64(f.limits.Burst)
}

// Hints of the refusal: what to try again with, by the credential refused.
const (
	bearerHint = "a credential that is valid: an unknown, revoked or expired one keeps failing (a new one comes from `credentials create`)"
	joinHint   = "a join token that is valid: an unknown, used or expired one keeps failing (a new one comes from `tokens create`)"
)

// take takes a failure from src's bucket before a credential check, the check then under
// way until settle is given what take returned; or refuses the call UNAVAILABLE (reason
// source-failures) with the seconds to wait when the bucket is empty; hint says what to
// try again with. Finding the bucket empty while checks of src are under way, it waits
// until one of them ends, or ctx does.
func (f *failureBound) take(ctx context.Context, src netip.Prefix, hint string) (checking *bucket, retryAfter int, err error) {
	return f.admit(ctx, src, hint, 1)
}

// allow refuses a call as take does when src's bucket is empty, waiting as take does, but
// takes nothing: a call it lets in costs its failure afterwards, by charge, when its check
// failed. Only calls whose checks under way at once are bounded otherwise (join.join's, by
// maxPublic) are let in so: a source with one failure left may have all of them fail, its
// bucket then below empty by as many, and its wait as much longer.
func (f *failureBound) allow(ctx context.Context, src netip.Prefix, hint string) (retryAfter int, err error) {
	_, retryAfter, err = f.admit(ctx, src, hint, 0)
	return retryAfter, err
}

// admit lets a call from src in when its bucket holds a failure, taking cost from it (a
// check then under way in the bucket it returns), or refuses it: when the bucket is empty
// and no check of src is under way, with the seconds to wait; when MaxFailureWaiters of
// its calls wait already, with 1. A call finding the bucket empty while checks are under
// way waits until one ends and looks again: each check under way ends either giving its
// failure back, which lets a waiting call in, or having failed, so that calls under way
// at once still never check more than the bucket holds. A call whose ctx ends while it
// waits gets ctx's error and retryAfter 0.
func (f *failureBound) admit(ctx context.Context, src netip.Prefix, hint string, cost float64) (checking *bucket, retryAfter int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		now := f.now()
		b := f.bucket(src, now)
		if b.tokens >= 1 {
			b.tokens -= cost
			if cost > 0 {
				b.checking++
			}
			return b, 0, nil
		}
		if b.checking == 0 {
			retryAfter, err = f.refuse(b, src, hint, now)
			return nil, retryAfter, err
		}
		if b.waiting >= f.waiters {
			return nil, 1, proto.Errorf(proto.Unavailable, "%d calls from %s are waiting already for the credential checks under way from there, the most the registry holds: try again in 1 s",
				b.waiting, sourceName(src)).WithReason(proto.ReasonSourceBusy)
		}
		if b.ended == nil {
			b.ended = make(chan struct{})
		}
		ended := b.ended
		b.waiting++
		f.mu.Unlock()
		select {
		case <-ended:
		case <-ctx.Done():
		}
		f.mu.Lock()
		b.waiting--
		if ctx.Err() != nil {
			return nil, 0, proto.Errorf(proto.Unavailable, "the call ended (%v) while it waited for the credential checks under way from %s: send it again", ctx.Err(), sourceName(src))
		}
	}
}

// refuse is the refusal of a call from src whose bucket b is empty as of now, and the
// seconds until it regains a failure; logged once a failureLogEvery at most. f.mu is
// held.
func (f *failureBound) refuse(b *bucket, src netip.Prefix, hint string, now time.Time) (retryAfter int, err error) {
	wait := time.Duration((1 - b.tokens) * float64(f.limits.Refill))
	retryAfter = max(1, int(math.Ceil(wait.Seconds())))
	b.refused++
	if b.logged.IsZero() || now.Sub(b.logged) >= failureLogEvery {
		f.log.Warn("too many failed credential checks from a source: its calls are refused before their check",
			"source", sourceName(src), "refused", b.refused, "burst", f.limits.Burst, "refill", f.limits.Refill, "retryAfter", retryAfter)
		b.refused, b.logged = 0, now
	}
	return retryAfter, proto.Errorf(proto.Unavailable, "too many failed credential checks came from %s (%d in a row, then one every %v): "+
		"the registry checks no credential from there for now. Try again in %d s with %s",
		sourceName(src), f.limits.Burst, f.limits.Refill, retryAfter, hint).WithReason(proto.ReasonSourceFailures)
}

// settle ends the check under way in b that take let in: it gives its failure back when
// the check did not fail, and wakes the calls waiting for it. b may have been forgotten
// meanwhile: its failure then goes nowhere, its source starting full again.
func (f *failureBound) settle(b *bucket, failed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !failed {
		f.refill(b, f.now())
		b.tokens = min(b.tokens+1, float64(f.limits.Burst))
	}
	b.checking--
	if b.ended != nil {
		close(b.ended)
		b.ended = nil
	}
}

// charge takes the failure of a call allow let in, whose check failed.
func (f *failureBound) charge(src netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bucket(src, f.now()).tokens--
}

// bucket is src's bucket as of now, remembered with its last call now: a source not
// remembered starts full. f.mu is held.
func (f *failureBound) bucket(src netip.Prefix, now time.Time) *bucket {
	el := f.sources[src]
	if el == nil {
		f.forget(now)
		el = f.order.PushBack(&bucket{source: src, tokens: float64(f.limits.Burst), when: now})
		f.sources[src] = el
	} else {
		f.order.MoveToBack(el)
	}
	b := el.Value.(*bucket)
	f.refill(b, now)
	return b
}

// forget makes room for one more source: it drops the sources whose buckets are full
// again (those longest without a call first, stopping at one that is not), then, when
// the bound is still reached, the one whose last call is oldest. f.mu is held.
func (f *failureBound) forget(now time.Time) {
	for el := f.order.Front(); el != nil && f.full(el.Value.(*bucket), now); el = f.order.Front() {
		f.drop(el)
	}
	if f.order.Len() >= f.max {
		f.drop(f.order.Front())
	}
}

func (f *failureBound) drop(el *list.Element) {
	delete(f.sources, el.Value.(*bucket).source)
	f.order.Remove(el)
}

// sourceName is a source as messages and logs name it: the IPv4 address, or the IPv6 /64.
func sourceName(src netip.Prefix) string {
	if src.Addr().Is4() {
		return src.Addr().String()
	}
	return src.String()
}
