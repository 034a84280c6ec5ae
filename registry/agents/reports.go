package agents

import (
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/better-compute/better-compute/lograte"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// spacing lets events through at most burst at once and, past those, one every gap on
// average (the generic cell rate algorithm): what an agent says that becomes a write of
// the store every tenant shares (a command's progress, its acks and inventory sections)
// costs the store no more than that, however fast the agent (or whoever holds its key)
// sends it. With a burst of 1 it lets through the first event, then the first after
// each gap.
type spacing struct {
	gap   time.Duration
	burst int
	// due is when the next event would be let through had none come early; zero before
	// the first.
	due time.Time
}

// wait is how long an event at now waits to be let through (take), 0 when it is let
// through now.
func (sp *spacing) wait(now time.Time) time.Duration {
	return max(0, sp.due.Add(-time.Duration(sp.burst-1)*sp.gap).Sub(now))
}

// take counts n events let through at now.
func (sp *spacing) take(now time.Time, n int) {
	if sp.due.Before(now) {
		sp.due = now
	}
	sp.due = sp.due.Add(time.Duration(n) * sp.gap)
}

// An agent's acks and inventory sections are recorded at most reportBurst at once and,
// past those, one every progressGap on average, each a write of the store every tenant
// shares: more than an honest agent sends at once (an ack and every section of a
// refresh), far less than what an agent's key can send (before, every message was a
// write, as fast as the store committed them). What comes faster waits, the latest of
// each (the ack, the apply failure, each section) replacing the one before it, and is
// recorded once the spacing lets it through (reports).
const reportBurst = 16

// pace is what one agent (node and role) had recorded and logged lately, shared by its
// sessions one after the other: the spacing of its reports (its hellos' writes, its acks
// and inventory sections), and when a refusal of each kind was last logged. Whoever
// holds an agent's key could otherwise start afresh with each connection: a hello
// alternating two inventories at every reconnect was a write each, as fast as the
// handshakes went. An honest agent's hello is written at once: its writes are within
// the burst.
type pace struct {
	mu     sync.Mutex
	space  spacing
	warned map[string]*lograte.Limiter
}

func newPace() *pace { return &pace{space: spacing{gap: progressGap, burst: reportBurst}} }

// letThrough counts n events let through at now and returns 0 when the spacing lets the
// first of them through now; otherwise it counts none, and returns how long the first
// waits.
func (p *pace) letThrough(now time.Time, n int) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	wait := p.space.wait(now)
	if wait == 0 {
		p.space.take(now, n)
	}
	return wait
}

// wait is how long an event at now waits for the spacing.
func (p *pace) wait(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.space.wait(now)
}

// take counts n events let through at now.
func (p *pace) take(now time.Time, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.space.take(now, n)
}

// refusals is the limiter of the lines that warn of the agent's refusals of kind: a
// refusal costs no write, but its agent may send it as fast as the link carries it, and
// each logged would fill the registry's log.
func (p *pace) refusals(kind string) *lograte.Limiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.warned[kind]
	if l == nil {
		if p.warned == nil {
			p.warned = map[string]*lograte.Limiter{}
		}
		l = &lograte.Limiter{}
		p.warned[kind] = l
	}
	return l
}

// idle reports whether p holds nothing a fresh pace would not at now: its spacing lets
// a whole burst through, and no refusal was logged within a lograte.Period.
func (p *pace) idle(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.space.due.After(now) {
		return false
	}
	for _, l := range p.warned {
		if !l.Quiet(now) {
			return false
		}
	}
	return true
}

// paceOf is the pace of agent id: the one its earlier session left (keepPace), or its
// session's that the new one replaces, or a new one.
func (e *Endpoint) paceOf(id identity) *pace {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.paces[id]; p != nil {
		return p
	}
	if s := e.sessions[id]; s != nil {
		return s.reports.pace
	}
	return newPace()
}

// keepPace keeps the pace of session s, which ended, for its agent's next session, unless
// it is idle (a fresh one stands for it): only an agent that reported, reconnected or was
// refused within its spacing or the last minute costs the endpoint its pace past its
// session. The paces kept are pruned of the idle ones once they have doubled since the
// last time, or a lograte.Period after it. e.mu is held.
func (e *Endpoint) keepPace(s *session, now time.Time) {
	if !s.reports.pace.idle(now) {
		if e.paces == nil {
			e.paces = map[identity]*pace{}
		}
		e.paces[s.identity] = s.reports.pace
	}
	if len(e.paces) >= e.pacesPrune || now.Sub(e.pacesPruned) > lograte.Period {
		for id, p := range e.paces {
			if p.idle(now) {
				delete(e.paces, id)
			}
		}
		e.pacesPrune, e.pacesPruned = max(minTurnsPrune, 2*len(e.paces)), now
	}
}

// warnRefused logs at warning level a refusal of kind (err) of what session s's agent
// sent, at most once a minute for the agent and kind (lograte), with how many refusals
// the line stands for.
func (e *Endpoint) warnRefused(s *session, kind, msg string, err error, args ...any) {
	s.reports.pace.refusals(kind).Warn(e.log, time.Now(), "refused", msg, append([]any{"node", s.node, "role", s.role, "err", err}, args...)...)
}

// reports are the acks and inventory sections an agent sent on its session that wait
// for its agent's spacing (pace): each a write once it lets them through (flushReports).
type reports struct {
	mu   sync.Mutex
	pace *pace
	// waiting is set while a flush is due or running: every ack and section then waits,
	// so that each is recorded after those the agent sent before it.
	waiting bool
	held    heldReports
}

// heldReports are the latest ack, apply failure and sections of each name not yet
// recorded; failedLast is set when the failure came after the ack.
type heldReports struct {
	acked, failed *proto.Ack
	failedLast    bool
	sections      map[string]json.RawMessage
}

// count is how many writes recording h takes.
func (h heldReports) count() int {
	n := len(h.sections)
	if h.acked != nil {
		n++
	}
	if h.failed != nil {
		n++
	}
	return n
}

// hold reports whether the ack a or the section of inv (one of the two) is to wait:
// reports wait already, or the session's spacing lets no more through now. One that
// waits replaces the one of its kind that waits (the ack, the apply failure, the section
// of its name), and the flush is scheduled (after); one that does not is counted, and is
// recorded now by the caller.
func (r *reports) hold(a *proto.Ack, inv *proto.Inventory, after func(time.Duration)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if !r.waiting {
		wait := r.pace.letThrough(now, 1)
		if wait == 0 {
			return false
		}
		r.waiting = true
		after(wait)
	}
	switch {
	case a != nil && a.Error != nil:
		r.held.failed, r.held.failedLast = a, true
	case a != nil:
		r.held.acked, r.held.failedLast = a, false
	default:
		if r.held.sections == nil {
			r.held.sections = map[string]json.RawMessage{}
		}
		r.held.sections[inv.Section] = inv.Data
	}
	return true
}

// holdHello reports whether h, the writes of a session's hello, waits: its agent's
// spacing lets none through now (an agent that said hello again and again, or sent a
// flood on the session before). Let through, they are counted all at once and recorded
// now by the caller, as one hello; held, they are recorded once the spacing lets them
// through, as reports that waited are (the flush is scheduled: after). The session is
// new: nothing of it waits yet.
func (r *reports) holdHello(h heldReports, after func(time.Duration)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	wait := r.pace.letThrough(time.Now(), h.count())
	if wait == 0 {
		return false
	}
	r.waiting, r.held = true, h
	after(wait)
	return true
}

// due takes the reports that wait, counted as let through at now.
func (r *reports) due() heldReports {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.held
	r.held = heldReports{}
	r.pace.take(time.Now(), h.count())
	return h
}

// drop forgets the reports that wait, counting none: they are not recorded, and the
// agent's spacing, which its next session shares, is left to what was.
func (r *reports) drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held = heldReports{}
}

// flushed ends a flush: when more reports came meanwhile, the next is scheduled
// (after), once the spacing lets them through.
func (r *reports) flushed(after func(time.Duration)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held.count() == 0 {
		r.waiting = false
		return
	}
	after(max(r.pace.wait(time.Now()), time.Millisecond))
}

// holdReport reports whether the agent's ack a or section inv (one of the two) waits
// for session s's spacing (reports.hold), scheduling its flush.
func (e *Endpoint) holdReport(s *session, a *proto.Ack, inv *proto.Inventory) bool {
	return s.reports.hold(a, inv, func(wait time.Duration) { e.flushAfter(s, wait) })
}

// helloHeld reports whether the writes of session s's hello h (the sections changed,
// and the generation applied when it moved, as an ack of it) wait for its agent's
// spacing (reports.holdHello), scheduling their flush. A hello that writes nothing (a
// reconnect that reports what the store holds) is never held.
func (e *Endpoint) helloHeld(s *session, h *proto.Hello, changed []string, observedMoved bool) bool {
	var held heldReports
	if observedMoved {
		held.acked = &proto.Ack{Generation: h.ObservedGeneration}
	}
	for _, section := range changed {
		if held.sections == nil {
			held.sections = map[string]json.RawMessage{}
		}
		held.sections[section] = h.Inventory[section]
	}
	if held.count() == 0 {
		return false
	}
	return s.reports.holdHello(held, func(wait time.Duration) { e.flushAfter(s, wait) })
}

// flushAfter records the reports of s that wait, after wait.
func (e *Endpoint) flushAfter(s *session, wait time.Duration) {
	time.AfterFunc(wait, func() { e.spawn(func() { e.flushReports(s) }) })
}

// flushReports records the reports of session s that waited, each as its message would
// have been (take): the ack and the apply failure in the order they came, then the
// sections, in the order a hello records them (reportOrder). Those of a session that
// ended are dropped (a newer session's hello may have recorded newer ones since its
// connection closed): the agent's next hello tells its generation and every section
// again, and a generation older than its NodeSpec's is pushed again, so an apply failure
// not recorded is told again once the agent applied it again (as for a message the
// store failed to record).
func (e *Endpoint) flushReports(s *session) {
	defer s.reports.flushed(func(wait time.Duration) { e.flushAfter(s, wait) })
	if s.over() || s.conn.Context().Err() != nil { // closed: ended, or replaced by a newer session whose hello is recorded
		s.reports.drop()
		return
	}
	h := s.reports.due()
	acks := []*proto.Ack{h.failed, h.acked}
	if h.failedLast {
		slices.Reverse(acks)
	}
	var order []string
	if len(h.sections) > 0 {
		var storedSite proto.SiteInventory
		err := e.cfg.Store.View(func(tx *store.Tx) (err error) { storedSite, err = tx.SiteInventory(s.node); return err })
		if !e.lost(s, "inventory section", err) {
			return
		}
		order = reportOrder(h.sections, storedSite)
	}
	for _, a := range acks {
		if a != nil && !e.goesOn(s, proto.MsgAck, e.recordAck(s, a)) {
			return
		}
	}
	for _, section := range order {
		if !e.goesOn(s, proto.MsgInventory, e.putReported(s, section, h.sections[section])) {
			return
		}
	}
}

// goesOn logs err, what recording a report (of type typ) of session s failed with,
// as received does, and reports whether the session goes on.
func (e *Endpoint) goesOn(s *session, typ proto.MessageType, err error) bool {
	if proto.CodeOf(err) == proto.Forbidden || s.over() {
		return false
	}
	if err != nil {
		e.log.Error("agent message", "node", s.node, "type", typ, "err", err)
	}
	return true
}

// reportOrder is the order in which sections that waited are recorded, one by one: those
// the `site` section among them counts as less cut than the stored one (storedSite)
// does, then the `site` section, then the others, each in name order. So the stored
// `site` section never says a section is whole, or less cut, while the copy stored
// beside it is cut more, as a site agent sends them and as a hello records them
// (splitSections).
func reportOrder(sections map[string]json.RawMessage, storedSite proto.SiteInventory) []string {
	site := saidSite(sections, storedSite)
	var before, after []string
	for _, section := range slices.Sorted(maps.Keys(sections)) {
		switch {
		case section == proto.SectionSite:
		case site.Omitted[section] < storedSite.Omitted[section]:
			before = append(before, section)
		default:
			after = append(after, section)
		}
	}
	if _, ok := sections[proto.SectionSite]; ok {
		before = append(before, proto.SectionSite)
	}
	return append(before, after...)
}
