package agents

import (
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
)

// pushQueue is the set of connected nodes whose NodeSpec moved and is not pushed yet.
// A node is in it once however often its spec moves before a worker gets to it.
type pushQueue struct {
	mu     sync.Mutex
	nodes  map[string]struct{}
	closed bool
	wake   chan struct{}
}

func (q *pushQueue) init() {
	q.nodes = map[string]struct{}{}
	q.wake = make(chan struct{}, 1)
}

func (q *pushQueue) add(node string) {
	q.mu.Lock()
	q.nodes[node] = struct{}{}
	q.mu.Unlock()
	q.signal()
}

func (q *pushQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *pushQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	close(q.wake)
}

// take waits for nodes to push and returns up to max of them; nil once closed.
func (q *pushQueue) take(max int) []string {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return nil
		}
		var out []string
		for n := range q.nodes {
			if len(out) == max {
				break
			}
			out = append(out, n)
			delete(q.nodes, n)
		}
		more := len(q.nodes) > 0
		q.mu.Unlock()
		if more {
			q.signal() // wake another worker for the rest
		}
		if len(out) > 0 {
			return out
		}
		<-q.wake
	}
}

// nodeSpecChanged is the store's hook: a node's spec moved, push it if the node is here.
func (e *Endpoint) nodeSpecChanged(node string, _ int64) {
	if e.session(node) != nil {
		e.push.add(node)
	}
}

// pushWorker pushes queued NodeSpecs, reading each batch in one transaction.
func (e *Endpoint) pushWorker() {
	for {
		nodes := e.push.take(pushBatch)
		if nodes == nil {
			return
		}
		specs := make([]proto.NodeSpec, 0, len(nodes))
		err := e.cfg.Store.View(func(tx *store.Tx) error {
			for _, n := range nodes {
				spec, err := tx.NodeSpec(n)
				if proto.CodeOf(err) == proto.NotFound {
					continue
				}
				if err != nil {
					return err
				}
				specs = append(specs, spec)
			}
			return nil
		})
		if err != nil {
			e.log.Error("read NodeSpecs to push", "err", err)
			continue
		}
		for _, spec := range specs {
			if s := e.session(spec.Node); s != nil {
				e.send(s, spec)
			}
		}
	}
}

// send pushes spec to the agent of s unless it has that generation or a newer one
// already. A write that fails or stalls ends the session; the agent reconnects and its
// hello brings it up to date.
func (e *Endpoint) send(s *session, spec proto.NodeSpec) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if spec.Generation <= s.sent {
		return
	}
	s.stream.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := proto.WriteMessage(s.stream, &proto.Message{Type: proto.MsgSpec, Spec: &spec}); err != nil {
		e.log.Debug("push NodeSpec", "node", s.node, "generation", spec.Generation, "err", err)
		s.conn.CloseWithError(codeProtocol, "NodeSpec push failed")
		return
	}
	e.pushes.Add(1)
	s.sent = spec.Generation
}
