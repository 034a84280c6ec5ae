package api

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// load is what admission holds: slots running, calls queued, tenants tracked.
func (a *admission) load() (running, queued, tenants int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, a.queued, len(a.tenants)
}

// empty fails t unless a holds nothing: every path gave its place back.
func (a *admission) empty(t *testing.T, after string) {
	t.Helper()
	if running, queued, tenants := a.load(); running != 0 || queued != 0 || tenants != 0 {
		t.Errorf("after %s: %d running, %d queued, %d tenants tracked; want none", after, running, queued, tenants)
	}
}

// untilQueued waits until a has n calls queued: a goroutine's run has taken its place.
func (a *admission) untilQueued(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a guard against a hang, not a measure
	for _, queued, _ := a.load(); queued != n; _, queued, _ = a.load() {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", queued, n)
		}
		runtime.Gosched()
	}
}

// admitNow admits a call of tenant at once, failing t when it is not.
func (a *admission) admitNow(t *testing.T, tenant string) *ticket {
	t.Helper()
	tk, err := a.arrive(tenant)
	if err == nil {
		err = tk.run(context.Background())
	}
	if err != nil {
		t.Fatalf("a call of %s: %v", tenant, err)
	}
	return tk
}

// queuedCall is a call waiting in its goroutine: its name is sent on admitted when it
// gets its slot, and it gives the slot back when end is called.
type queuedCall struct {
	name         string
	finish, over chan struct{}
}

// end lets the call finish and waits until it gave back what it held.
func (q queuedCall) end() {
	close(q.finish)
	<-q.over
}

// queue queues a call of tenant named name, and waits until it is queued (the n-th).
func (a *admission) queue(t *testing.T, tenant, name string, n int, admitted chan<- string) queuedCall {
	t.Helper()
	q := queuedCall{name: name, finish: make(chan struct{}), over: make(chan struct{})}
	tk, err := a.arrive(tenant)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() {
		defer close(q.over)
		defer tk.done()
		if err := tk.run(context.Background()); err != nil {
			admitted <- name + " refused: " + err.Error()
			return
		}
		admitted <- name
		<-q.finish
	}()
	a.untilQueued(t, n)
	return q
}

// TestAdmissionTakesTenantsInTurn: with one slot held by a call of a, three tenants
// queue three calls each (a's first); each freed slot goes to the tenant served longest
// ago, a tenant's own calls in the order they came: b, c, a, b, c, a, ...
func TestAdmissionTakesTenantsInTurn(t *testing.T) {
	a := newAdmission(Limits{Running: 1, Waiting: 3}, time.Hour)
	holder := a.admitNow(t, "a")
	admitted := make(chan string)
	calls := map[string]queuedCall{}
	n := 0
	for _, tenant := range []string{"a", "b", "c"} {
		for i := range 3 {
			n++
			name := tenant + string(rune('1'+i))
			calls[name] = a.queue(t, tenant, name, n, admitted)
		}
	}
	holder.done()
	var order []string
	for range calls {
		name := <-admitted
		order = append(order, name)
		calls[name].end()
	}
	if want := []string{"b1", "c1", "a1", "b2", "c2", "a2", "b3", "c3", "a3"}; !slices.Equal(order, want) {
		t.Errorf("admitted %v, want %v", order, want)
	}
	a.empty(t, "every call served")
}

// TestAdmissionWorkConserving: a tenant alone gets every slot at once; two busy tenants
// waiting for the slots get half of them each.
func TestAdmissionWorkConserving(t *testing.T) {
	a := newAdmission(Limits{Running: 4, Waiting: 4}, time.Hour)
	var held []*ticket
	for range 4 {
		held = append(held, a.admitNow(t, "a"))
	}
	admitted := make(chan string)
	var calls []queuedCall
	for i := range 4 {
		calls = append(calls, a.queue(t, "a", "a", 2*i+1, admitted), a.queue(t, "b", "b", 2*i+2, admitted))
	}
	for _, h := range held {
		h.done()
	}
	count := map[string]int{}
	for range 4 {
		count[<-admitted]++
	}
	if count["a"] != 2 || count["b"] != 2 {
		t.Errorf("the four freed slots went %v, want 2 each", count)
	}
	go func() {
		for range 4 {
			<-admitted
		}
	}()
	for _, c := range calls {
		c.end()
	}
	a.empty(t, "every call served")
}

// TestAdmissionRefusesAndGivesPlacesBack: a tenant's calls beyond Limits.Waiting are
// refused tenant-busy, another tenant's are not; a call whose client is gone, or that
// waited its most, gives its place back; a long poll gives its slot back and is bounded.
// After each path admission holds nothing.
func TestAdmissionRefusesAndGivesPlacesBack(t *testing.T) {
	a := newAdmission(Limits{Running: 1, Waiting: 2, Watching: 1}, time.Hour)
	holder := a.admitNow(t, "beta")
	var waiting []*ticket
	for range 2 {
		tk, err := a.arrive("beta")
		if err != nil {
			t.Fatal(err)
		}
		waiting = append(waiting, tk)
	}
	refused, err := a.arrive("beta")
	if e := proto.AsError(err); err == nil || e.Code != proto.Unavailable || e.Details.Reason != proto.ReasonTenantBusy {
		t.Errorf("a call beyond beta's waiting bound: %v", err)
	}
	refused.done()
	acme, err := a.arrive("acme")
	if err != nil {
		t.Errorf("acme's call while beta's are at their bound: %v", err)
	}
	acme.done()
	for _, tk := range waiting {
		tk.done() // their bodies never came
	}
	holder.done()
	a.empty(t, "refused and unread calls")

	// A client gone while its call waits.
	holder = a.admitNow(t, "beta")
	tk, _ := a.arrive("beta")
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error)
	go func() { gone <- tk.run(ctx) }()
	a.untilQueued(t, 1)
	cancel()
	if err := <-gone; proto.CodeOf(err) != proto.Unavailable {
		t.Errorf("a call whose client went: %v", err)
	}
	tk.done()
	if _, queued, _ := a.load(); queued != 0 {
		t.Errorf("the gone call is still queued")
	}
	holder.done()
	a.empty(t, "a client gone")

	// A call that waited its most.
	short := newAdmission(Limits{Running: 1}, time.Millisecond)
	holder = short.admitNow(t, "beta")
	tk, _ = short.arrive("beta")
	if err := tk.run(context.Background()); proto.AsError(err).Details.Reason != proto.ReasonTenantBusy {
		t.Errorf("a call that waited its most: %v", err)
	}
	tk.done()
	holder.done()
	short.empty(t, "a call that waited its most")

	// A long poll gives its slot to the call waiting; a second one of the tenant is refused.
	poll := a.admitNow(t, "beta")
	admitted := make(chan string)
	next := a.queue(t, "beta", "next", 1, admitted)
	if err := poll.watch(); err != nil {
		t.Fatal(err)
	}
	if name := <-admitted; name != "next" {
		t.Errorf("the slot the long poll gave back went to %s", name)
	}
	next.end()
	acmes := a.admitNow(t, "acme")
	if err := acmes.watch(); err != nil {
		t.Errorf("acme's long poll while beta has one: %v", err)
	}
	third := a.admitNow(t, "beta")
	if err := third.watch(); proto.AsError(err).Details.Reason != proto.ReasonTenantBusy {
		t.Errorf("beta's second long poll: %v", err)
	}
	for _, tk := range []*ticket{poll, acmes, third} {
		tk.done()
	}
	a.empty(t, "long polls")
}
