package api

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Limits bound what the authenticated calls of the HTTPS API may hold at once, so that no
// tenant's credential keeps the registry from the others' calls (docs/security.md, "What
// strangers can cost"). The admin socket's calls and the public ones are not counted.
// A zero field is its default.
type Limits struct {
	// Running bounds the authenticated calls that run at once, every tenant's together.
	// While more wait, each freed slot goes to the waiting tenants in turn (the one
	// served longest ago first; a tenant's own calls in the order they came), so a tenant
	// alone gets every slot and two busy tenants half each. Default DefaultRunning.
	Running int
	// Waiting bounds the calls one tenant has waiting: their bodies arriving, or queued
	// for a slot. One more is refused UNAVAILABLE (reason tenant-busy) with Retry-After,
	// before its body is read. Default DefaultWaiting.
	Waiting int
	// Watching bounds the long polls (metal.events with wait, workflows.get with
	// afterRev) one tenant has waiting for a change at once; they hold no running slot
	// while they wait. One more is refused as above. Default DefaultWatching.
	Watching int
}

// Defaults of Limits, and how long a call may wait for a slot before it is refused.
const (
	DefaultWaiting  = 64
	DefaultWatching = 32
	maxQueueWait    = 5 * time.Second
)

// DefaultRunning is the default of Limits.Running: four calls for each CPU Go may use
// (a call mostly waits for the store).
func DefaultRunning() int { return 4 * runtime.GOMAXPROCS(0) }

// withDefaults is l with every zero field its default.
func (l Limits) withDefaults() Limits {
	if l.Running <= 0 {
		l.Running = DefaultRunning()
	}
	if l.Waiting <= 0 {
		l.Waiting = DefaultWaiting
	}
	if l.Watching <= 0 {
		l.Watching = DefaultWatching
	}
	return l
}

// admission hands out the running slots of the authenticated calls fairly between
// tenants.
type admission struct {
	limits Limits
	// wait is how long a call may wait for a slot.
	wait time.Duration
	mu   sync.Mutex
	// running counts the slots held; queued the calls waiting for one, every tenant's.
	running, queued int
	// served counts the slots handed out: a tenant's lastServed is its last one's.
	served uint64
	// arrived counts the calls queued, to order the tenants whose turns tie.
	arrived uint64
	// tenants holds the load of each tenant with a call in admission.
	tenants map[string]*tenantLoad
}

// tenantLoad is what one tenant holds in admission.
type tenantLoad struct {
	pending, running, watching int
	lastServed                 uint64
	// queue is the tenant's calls waiting for a slot, oldest first.
	queue []*ticket
}

// A ticket is one call's place in admission: pending (its body arriving, or queued),
// running (holding a slot), watching (a long poll waiting for a change), or done.
type ticket struct {
	a      *admission
	tenant string
	state  ticketState
	// seq orders the queued tickets; admitted is closed when the ticket gets a slot.
	seq      uint64
	admitted chan struct{}
	// waited is how long run waited for a slot; 0 when one was free.
	waited time.Duration
}

type ticketState int

const (
	ticketDone ticketState = iota
	ticketPending
	ticketRunning
	ticketWatching
)

func newAdmission(l Limits, wait time.Duration) *admission {
	return &admission{limits: l.withDefaults(), wait: wait, tenants: map[string]*tenantLoad{}}
}

// tenantBusy is the refusal of a call beyond its tenant's bounds: nothing of it ran.
func tenantBusy(format string, args ...any) error {
	return proto.Errorf(proto.Unavailable, format+": try again in %d s", append(args, retryAfter)...).WithReason(proto.ReasonTenantBusy)
}

// arrive gives a call of tenant a pending place, or refuses it when the tenant has as
// many pending as Limits.Waiting. The ticket is released with done, whatever happens.
func (a *admission) arrive(tenant string) (*ticket, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	tl := a.tenants[tenant]
	if tl == nil {
		tl = &tenantLoad{}
		a.tenants[tenant] = tl
	}
	t := &ticket{a: a, tenant: tenant}
	if tl.pending >= a.limits.Waiting {
		a.forget(tenant, tl)
		return t, tenantBusy("the registry is busy with this tenant's calls: %d wait already, the most it takes", tl.pending)
	}
	tl.pending++
	t.state = ticketPending
	return t, nil
}

// run waits for a slot: at once when one is free and no call waits, else in turn.
// A call that has waited the admission's wait is refused; one whose client is gone
// gives its place back.
func (t *ticket) run(ctx context.Context) error {
	a := t.a
	a.mu.Lock()
	if a.running < a.limits.Running && a.queued == 0 {
		t.admit(a.tenants[t.tenant])
		a.mu.Unlock()
		return nil
	}
	tl := a.tenants[t.tenant]
	a.arrived++
	t.seq, t.admitted = a.arrived, make(chan struct{})
	tl.queue = append(tl.queue, t)
	a.queued++
	a.mu.Unlock()

	start := time.Now()
	defer func() { t.waited = time.Since(start) }()
	timer := time.NewTimer(a.wait)
	defer timer.Stop()
	select {
	case <-t.admitted:
		return nil
	case <-ctx.Done():
		return proto.Errorf(proto.Unavailable, "the call was given up while it waited for its turn: %v", context.Cause(ctx))
	case <-timer.C:
		a.mu.Lock()
		defer a.mu.Unlock()
		if t.state == ticketRunning { // its turn came as the wait ended
			return nil
		}
		return tenantBusy("the registry is busy: the call waited %v for its turn", a.wait)
	}
}

// admit moves a pending ticket to a slot; a.mu is held.
func (t *ticket) admit(tl *tenantLoad) {
	a := t.a
	tl.pending--
	tl.running++
	a.running++
	a.served++
	tl.lastServed = a.served
	t.state = ticketRunning
	if t.admitted != nil {
		close(t.admitted)
	}
}

// dispatch hands the free slots to the waiting calls: each to the tenant with a call
// waiting that was served longest ago (the one queued first among ties), its oldest
// call. a.mu is held.
func (a *admission) dispatch() {
	for a.running < a.limits.Running && a.queued > 0 {
		var next *tenantLoad
		for _, tl := range a.tenants {
			if len(tl.queue) > 0 && (next == nil || tl.lastServed < next.lastServed ||
				tl.lastServed == next.lastServed && tl.queue[0].seq < next.queue[0].seq) {
				next = tl
			}
		}
		t := next.queue[0]
		next.queue = next.queue[1:]
		a.queued--
		t.admit(next)
	}
}

// watch moves a running call to waiting for a change: it gives its slot back, and is
// refused when its tenant has as many long polls waiting as Limits.Watching.
func (t *ticket) watch() error {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.state != ticketRunning {
		return nil
	}
	tl := a.tenants[t.tenant]
	t.release(tl)
	if tl.watching >= a.limits.Watching {
		a.forget(t.tenant, tl)
		return tenantBusy("the registry is busy with this tenant's calls: %d wait for a change already, the most it takes", tl.watching)
	}
	tl.watching++
	t.state = ticketWatching
	return nil
}

// done gives back whatever the ticket holds.
func (t *ticket) done() {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	tl := a.tenants[t.tenant]
	switch t.state {
	case ticketDone:
		return
	case ticketPending:
		if i := slices.Index(tl.queue, t); i >= 0 {
			tl.queue = slices.Delete(tl.queue, i, i+1)
			a.queued--
		}
		tl.pending--
	case ticketRunning:
		t.release(tl)
	case ticketWatching:
		tl.watching--
	}
	t.state = ticketDone
	a.forget(t.tenant, tl)
}

// release gives a running ticket's slot to the next call; a.mu is held.
func (t *ticket) release(tl *tenantLoad) {
	tl.running--
	t.a.running--
	t.state = ticketDone
	t.a.dispatch()
}

// forget drops a tenant that holds nothing any more; a.mu is held.
func (a *admission) forget(tenant string, tl *tenantLoad) {
	if tl.pending == 0 && tl.running == 0 && tl.watching == 0 {
		delete(a.tenants, tenant)
	}
}
