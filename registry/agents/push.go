package agents

import (
	"slices"
	"sync"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

const (
	// pushWorkers push NodeSpecs to connected agents.
	pushWorkers = 2
	// pushBatch is how many nodes a worker reads from the store in one transaction.
	pushBatch = 256
	// pushRetryMin and pushRetryMax bound the pause of the push workers after a read of
	// the NodeSpecs to push failed (the store unavailable: on etcd a majority of its
	// members out of reach): it starts at the first and doubles with each failure in a
	// row, up to the second, which bounds how long a store back already waits for the
	// pushes.
	pushRetryMin, pushRetryMax = 250 * time.Millisecond, 8 * time.Second
)

// pushQueue is the set of connected nodes whose NodeSpec moved and is not pushed yet,
// and the deferred nodes the window handed a place to. A node is in the set once however
// often its spec moves before a worker gets to it. After a read of the store failed the
// nodes read are back in it (putBack) and no worker takes any until the pause of the
// failure streak has passed.
type pushQueue struct {
	mu     sync.Mutex
	nodes  map[string]struct{}
	handed []queued
	closed bool
	wake   chan struct{}
	// failures counts the reads failed in a row, since the streak's first (failedSince);
	// resume is when the workers read again. failedReads counts every failed read since
	// the queue's start, for monitoring.
	failures    int
	failedSince time.Time
	resume      time.Time
	failedReads int64
}

func (q *pushQueue) init() {
	q.nodes = map[string]struct{}{}
	q.wake = make(chan struct{}, 1)
}

func (q *pushQueue) add(node string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.nodes[node] = struct{}{}
	q.signal()
}

// hand adds a deferred node given a place (the window's handoff); false once closed.
func (q *pushQueue) hand(h queued) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.handed = append(q.handed, h)
	q.signal()
	return true
}

func (q *pushQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// close ends the queue and returns the handed nodes no worker took, whose places are
// to be given back.
func (q *pushQueue) close() []queued {
	q.mu.Lock()
	q.closed = true
	handed := q.handed
	q.handed = nil
	q.mu.Unlock()
	close(q.wake)
	return handed
}

// putBack returns nodes, whose read failed at now, to the queue: the handed ones with
// their places, before the others handed since, and holds every worker back for the
// failure streak's pause, which it returns, and whether this failure began the streak.
// Once the queue is closed it keeps none and returns the handed ones, whose places are to
// be given back. Each call counts a failed read (readFailures).
func (q *pushQueue) putBack(nodes []queued, now time.Time) (pause time.Duration, first bool, refused []queued) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.failedReads++
	var handed []queued
	for _, n := range nodes {
		if n.slot != nil {
			handed = append(handed, n)
		}
	}
	if q.closed {
		return 0, false, handed
	}
	q.handed = append(handed, q.handed...)
	for _, n := range nodes {
		if n.slot == nil {
			q.nodes[n.node] = struct{}{}
		}
	}
	if first = q.failures == 0; first {
		q.failedSince = now
	}
	pause = min(pushRetryMin<<min(q.failures, 16), pushRetryMax)
	q.failures++
	q.resume = now.Add(pause)
	return pause, first, nil
}

// readWorked ends the failure streak, if any, after a read at now that worked; it
// returns how many reads failed in it and how long it lasted (0 when there was none).
func (q *pushQueue) readWorked(now time.Time) (failures int, lasted time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.failures == 0 {
		return 0, 0
	}
	failures, lasted = q.failures, now.Sub(q.failedSince)
	q.failures, q.resume = 0, time.Time{}
	return failures, lasted
}

// readFailures counts the reads of NodeSpecs to push that failed since the queue's start.
func (q *pushQueue) readFailures() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failedReads
}

// take waits for nodes to push and returns up to max of them, the handed ones first;
// nil once closed. It waits out the pause of a failure streak first (putBack).
func (q *pushQueue) take(max int) []queued {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return nil
		}
		if pause := time.Until(q.resume); pause > 0 {
			q.mu.Unlock()
			t := time.NewTimer(pause)
			select {
			case <-q.wake: // closed, or nodes added: the pause still holds them
			case <-t.C:
			}
			t.Stop()
			continue
		}
		n := min(max, len(q.handed))
		out := q.handed[:n:n] // append copies it: the rest stays q.handed's
		if q.handed = q.handed[n:]; len(q.handed) == 0 {
			q.handed = nil
		}
		for n := range q.nodes {
			if len(out) == max {
				break
			}
			out = append(out, queued{node: n})
			delete(q.nodes, n)
		}
		if len(q.nodes) > 0 || len(q.handed) > 0 {
			// Another worker for the rest, under mu as add and hand signal: once mu is
			// released close may close wake, and a send on it would panic.
			q.signal()
		}
		q.mu.Unlock()
		if len(out) > 0 {
			return out
		}
		<-q.wake
	}
}

// nodeSpecChanged is the store's hook: a node's spec moved, push it if an agent of the
// node that takes NodeSpecs (a site agent, a machine's installed OS) is here.
func (e *Endpoint) nodeSpecChanged(node string, _ int64) {
	if e.specSession(node) != nil {
		e.push.add(node)
	}
}

// specSession is the session here of node's agent that takes NodeSpecs
// (proto.Role.TakesNodeSpecs: a site agent, a machine's installed OS), nil when none is.
func (e *Endpoint) specSession(node string) *session {
	for _, role := range proto.Roles {
		if role.TakesNodeSpecs() {
			if s := e.session(node, role); s != nil {
				return s
			}
		}
	}
	return nil
}

// pushWorker pushes queued NodeSpecs, reading each batch in one transaction: a node
// handed a place (window.handoff) is read then, once, and sent in that place. A session
// whose certificate the node read in that transaction no longer passes
// (store.Tx.CheckAgent) is ended instead: an installed OS's agent of an earlier
// installation never gets the NodeSpec of the next one, even when the push comes before
// this registry hears of the installation's change (identityChanged). A handed place not
// used (the node or its session gone, the session of another tenant now) is given back.
// A read that fails loses no node: the batch goes back to the queue, the handed nodes
// keeping their places, and the workers read again after a pause that grows with each
// failure in a row (putBack), logged once for the streak and once when reads work again.
func (e *Endpoint) pushWorker() {
	for {
		nodes := e.push.take(pushBatch)
		if nodes == nil {
			return
		}
		nodes = slices.DeleteFunc(nodes, func(q queued) bool { return q.slot == nil && e.deferred(q.node) })
		if len(nodes) == 0 {
			continue
		}
		pushes, unused, err := e.readPushes(nodes)
		if err != nil {
			pause, first, refused := e.push.putBack(nodes, time.Now())
			if first {
				e.log.Error("read NodeSpecs to push: pushing them once the store answers", "nodes", len(nodes), "retryIn", pause, "err", err)
			} else {
				e.log.Debug("read NodeSpecs to push failed again", "nodes", len(nodes), "retryIn", pause, "err", err)
			}
			for _, q := range refused {
				e.window.release(q.slot)
			}
			continue
		}
		if failures, lasted := e.push.readWorked(time.Now()); failures > 0 {
			e.log.Info("NodeSpec reads work again: pushing the nodes held back", "failures", failures, "after", lasted)
		}
		for _, sl := range unused {
			e.window.release(sl)
		}
		for _, p := range pushes {
			if e.letGo(p.s, p.refused) {
				e.window.release(p.slot)
				continue
			}
			e.sendAside(p.s, p.spec, p.slot)
		}
	}
}

// sendAside is send for a push worker: the worker takes the push's place in the window
// (waiting for one, as the window paces the pushes), and the write runs on a goroutine
// of its own. A write waits for the agent to read, up to writeTimeout, and an agent that
// never reads its session stream (a client of its own making, with the machine's key)
// would otherwise hold the worker, and every other node's push behind it, that long.
// While a write on s is under way, the whole push goes aside: its goroutine takes a
// place, if it needs one, once that write ends.
func (e *Endpoint) sendAside(s *session, spec proto.NodeSpec, sl *slot) {
	if sl == nil && e.needsPlace(s, spec) {
		if sl = e.window.acquire(s.tenant, s.node, e.ctx.Done(), s.conn.Context().Done()); sl == nil {
			return // deferred (its tenant holds its share), the endpoint is closing or the session ended
		}
	}
	if !e.spawn(func() { e.send(s, spec, sl) }) {
		e.window.release(sl)
	}
}

// needsPlace reports whether a push of spec on s takes a place of its own: s is free
// to write on, the agent has an older generation, and no push of s holds a place that
// this one would take over (send).
func (e *Endpoint) needsPlace(s *session, spec proto.NodeSpec) bool {
	if !s.wmu.TryLock() {
		return false // a write under way: send takes the place, if needed, once it ends
	}
	defer s.wmu.Unlock()
	return spec.Generation > s.sent && !s.ended && s.pending == nil
}

// push is one NodeSpec a push worker read for a connected agent.
type push struct {
	s    *session
	spec proto.NodeSpec
	// refused is why the node refuses the session's certificate, nil when it passes.
	refused error
	// slot is the place handed to the node, nil when the push is to take one.
	slot *slot
}

// readPushes reads the NodeSpecs of nodes in one transaction: the pushes to make, and the
// handed places not to be used (the node, its NodeSpec or its session gone, another
// tenant's session now, a record this registry cannot read). err is the transaction's
// failure (the store unavailable), and then nothing was read.
func (e *Endpoint) readPushes(nodes []queued) (pushes []push, unused []*slot, err error) {
	pushes = make([]push, 0, len(nodes))
	err = e.cfg.Store.View(func(tx *store.Tx) error {
		for _, q := range nodes {
			spec, err := tx.NodeSpec(q.node)
			if proto.CodeOf(err) == proto.Unavailable {
				return err // the store did not answer: the batch is read again
			}
			if err != nil {
				if proto.CodeOf(err) != proto.NotFound {
					// Reading it again would fail the same way (a record of another schema,
					// written by a newer replica): its next change queues it again.
					e.log.Error("read a NodeSpec to push: not pushed until it changes", "node", q.node, "err", err)
				}
				unused = append(unused, q.slot)
				continue
			}
			s := e.session(spec.Node, spec.Role)
			if s == nil {
				unused = append(unused, q.slot)
				continue
			}
			sl := q.slot
			if sl != nil && sl.tenant != s.tenant { // another tenant's session now: it takes a place of its own
				unused, sl = append(unused, sl), nil
			}
			pushes = append(pushes, push{s, spec, tx.CheckAgent(s.credential()), sl})
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return pushes, unused, nil
}

// deferred sets node aside, unread, when the tenant of its agent's session here holds
// its share of the push window (window.deferIfAtShare): it comes back with a place that
// frees within the share (window.handoff). A node with no session here is left to the
// read, which skips it.
func (e *Endpoint) deferred(node string) bool {
	if s := e.specSession(node); s != nil {
		return e.window.deferIfAtShare(s.tenant, node)
	}
	return false
}

// send pushes spec to the agent of s unless it has that generation or a newer one
// already. The push takes a place in the window first (waiting for one), unless it was
// handed one (sl, given back when unused) or the session holds one for an older push
// not yet acknowledged, which this one supersedes and takes over. A write that fails or
// stalls ends the session; the agent reconnects and its hello brings it up to date. A
// spec whose message takes more than an agent frame is no failed link: it is not sent
// (tooLargeToPush), and the session goes on.
func (e *Endpoint) send(s *session, spec proto.NodeSpec, sl *slot) {
	body, err := proto.Marshal(&proto.Message{Type: proto.MsgSpec, Spec: &spec})
	for {
		s.wmu.Lock()
		if spec.Generation <= s.sent || s.ended {
			s.wmu.Unlock()
			e.window.release(sl)
			return
		}
		if err == nil && len(body) > proto.MaxFrame {
			s.wmu.Unlock()
			e.window.release(sl)
			e.tooLargeToPush(s, spec, len(body))
			return
		}
		if sl != nil || s.pending != nil {
			break
		}
		s.wmu.Unlock()
		if sl = e.window.acquire(s.tenant, s.node, e.ctx.Done(), s.conn.Context().Done()); sl == nil {
			return // deferred (its tenant holds its share), the endpoint is closing or the session ended
		}
	}
	defer s.wmu.Unlock()
	if p := s.pending; p != nil { // superseded: this push takes its place
		p.timer.Stop()
		s.pending = nil
		e.window.release(sl)
		sl = p.slot
	}
	s.stream.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err == nil {
		err = proto.WriteFrame(s.stream, body)
	}
	if err != nil {
		e.window.end(sl, pushFailed)
		e.log.Debug("push NodeSpec", "node", s.node, "generation", spec.Generation, "err", err)
		s.conn.CloseWithError(codeProtocol, "NodeSpec push failed")
		return
	}
	e.window.sent(sl)
	e.pushes.Add(1)
	s.sent = spec.Generation
	p := &pendingPush{slot: sl, generation: spec.Generation}
	p.timer = time.AfterFunc(e.cfg.AckTimeout, func() { e.pushDone(s, p, pushTimedOut) })
	s.pending = p
}

// tooLargeToPush logs spec, whose message to the agent of s takes size bytes, more than
// an agent frame carries, as not pushed: no session of the agent could ever be sent it,
// so it is not written, the session goes on with the generation the agent has, and the
// node's next NodeSpec that fits is pushed on it. The store sets no such NodeSpec
// (store.Tx.SetNodeSpec); one an earlier release stored, before that bound, is what
// comes here. Before, the write failed as a failed link: the session ended, and the
// agent's next hello had it pushed again, for ever.
func (e *Endpoint) tooLargeToPush(s *session, spec proto.NodeSpec, size int) {
	e.log.Error("NodeSpec too large for an agent frame, not pushed: the agent keeps the generation it has until the node's NodeSpec changes",
		"node", s.node, "role", s.role, "generation", spec.Generation, "bytes", size, "max", proto.MaxFrame)
}

// pendingPush is a session's push written and not yet acknowledged, holding its place in
// the window until an acknowledgement, the ack timeout or the session's end.
type pendingPush struct {
	slot       *slot
	generation int64
	timer      *time.Timer
}

// pushDone ends p, if it is still s's pending push, and gives its place back.
func (e *Endpoint) pushDone(s *session, p *pendingPush, how pushEnd) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.pending == p {
		e.endPendingLocked(s, how)
	}
}

// acknowledged ends s's pending push when the agent acknowledged its generation or a
// newer one (an ack of an older generation is not an answer to it).
func (e *Endpoint) acknowledged(s *session, generation int64) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.pending != nil && generation >= s.pending.generation {
		e.endPendingLocked(s, pushAcked)
	}
}

// endPendingLocked ends s's pending push, if any; s.wmu is held.
func (e *Endpoint) endPendingLocked(s *session, how pushEnd) {
	if p := s.pending; p != nil {
		p.timer.Stop()
		s.pending = nil
		e.window.end(p.slot, how)
	}
}

// PushWindow returns the state of the window on pushes not yet acknowledged.
func (e *Endpoint) PushWindow() PushWindow { return e.window.state() }
