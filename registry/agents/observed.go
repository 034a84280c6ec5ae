package agents

import (
	"context"
	"sync"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// observedSignal wakes whoever waits for an agent's generation; the zero value is ready.
// Every commit of an agent status notifies it (Start).
type observedSignal struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever an agent applies a generation
}

// wait is the channel the next observed is closed on.
func (o *observedSignal) wait() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.changed == nil {
		o.changed = make(chan struct{})
	}
	return o.changed
}

// notify wakes every waiter.
func (o *observedSignal) notify() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
}

// observed tells the OnObserved hook that node's agent applied generation. (WaitObserved's
// waiters wake at the commit of any agent status, whichever replica made it.)
func (e *Endpoint) observed(node string, generation int64) {
	if e.cfg.OnObserved != nil {
		e.cfg.OnObserved(node, generation)
	}
}

// WaitObserved returns once node's agent has applied a generation at least its desired
// one (metal.Generations); a node without a NodeSpec has nothing to apply.
func (e *Endpoint) WaitObserved(ctx context.Context, node string) error {
	for {
		changed := e.observe.wait()
		var done bool
		err := e.cfg.Store.View(func(tx *store.Tx) error {
			spec, err := tx.NodeSpec(node)
			if proto.CodeOf(err) == proto.NotFound {
				done = true
				return nil
			}
			if err != nil {
				return err
			}
			status, err := tx.AgentStatus(node)
			if proto.CodeOf(err) == proto.NotFound {
				return nil
			}
			done = err == nil && status.ObservedGeneration >= spec.Generation
			return err
		})
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
