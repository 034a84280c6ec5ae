package store

import (
	"errors"
	"slices"
	"sync"
)

const (
	// etcdBatchMax is how many calls one group commit takes at most: each small writer
	// reads a key or two, and a transaction keeps one compare per key read up to
	// etcdMaxTxnOps.
	etcdBatchMax = 48
	// noFloor is the floor of a call made with no Reader's moment.
	noFloor = -1
)

// errRunAlone tells a call of a group to run as a transaction of its own.
var errRunAlone = errors.New("store: run the call alone")

// group collects the calls of Update and Batch that arrive while a group commits.
type group struct {
	mu      sync.Mutex
	waiting []*batchCall
	running bool
	// gather is the wait under load for the callers a commit released.
	gather gather
}

type batchCall struct {
	fn func(kvTx) error
	// floor is the Reader's moment the call reads at or after (noFloor: none, its group
	// takes a barrier).
	floor int64
	done  chan error // nil: committed; errRunAlone: run it alone; else its error
	// hooks are the commit hooks fn set in the group's transaction: once told nil, the
	// call runs them on its own goroutine, as a transaction alone does.
	hooks []func()
}

// update commits fn together with the other calls of this replica waiting at the same
// time, in one transaction (group commit): a call that finds no group committing starts
// one at once, with no delay, and the calls that arrive while it commits make the next,
// which, under load (the group before took more than one call), first gathers the
// callers that commit released (runGroups). A call that fails is taken out of its group
// and run alone (so it returns its own error, and nothing it wrote is kept), and the
// others run again without it; when
// the commit meets a conflict (another replica wrote what one of the calls read), each
// call runs alone, retrying on its own. A call returns only after its writes committed,
// exactly once, and runs its commit hooks first, on its own goroutine: a hook that
// writes does not wait for the group goroutine that would run it.
func (b *etcdBackend) update(fn func(kvTx) error) error { return b.updateAt(noFloor, fn) }

// updateAt is update reading at floor or later, a Reader's moment: a group whose calls
// all have one reads at the latest of them, with no barrier of its own (beginAt).
func (b *etcdBackend) updateAt(floor int64, fn func(kvTx) error) error {
	c := &batchCall{fn: fn, floor: floor, done: make(chan error, 1)}
	b.group.mu.Lock()
	b.group.waiting = append(b.group.waiting, c)
	b.group.gather.arrived(len(b.group.waiting))
	if !b.group.running {
		b.group.running = true
		go b.runGroups()
	}
	b.group.mu.Unlock()
	switch err := <-c.done; err {
	case nil:
		for _, h := range c.hooks {
			h()
		}
		return nil
	case errRunAlone:
		return b.updateAlone(fn)
	default:
		return err
	}
}

// batch is update: a group commit takes concurrent writers together already, without
// the wait bbolt's Batch makes for them.
func (b *etcdBackend) batch(fn func(kvTx) error) error { return b.update(fn) }

// runGroups commits the waiting calls, etcdBatchMax at a time, until none waits; under
// load each group first gathers the callers the commit before it released (gather).
func (b *etcdBackend) runGroups() {
	for released := 0; ; {
		b.group.mu.Lock()
		b.group.gather.wait(&b.group.mu, released, b.ctx.Done())
		calls := b.group.waiting
		b.group.waiting = nil
		if len(calls) == 0 {
			b.group.running = false
			b.group.mu.Unlock()
			return
		}
		b.group.mu.Unlock()
		released = len(calls)
		for chunk := range slices.Chunk(calls, etcdBatchMax) {
			for len(chunk) > 0 {
				chunk = b.tryBatch(chunk)
			}
		}
	}
}

// tryBatch runs calls in one transaction and tells each its outcome, but for the calls
// it returns: those run again in a new transaction.
func (b *etcdBackend) tryBatch(calls []*batchCall) []*batchCall {
	tell := func(err error) {
		b.releasing()
		for _, c := range calls {
			c.done <- err
		}
	}
	floor := int64(0)
	for _, c := range calls {
		if c.floor == noFloor {
			floor = noFloor
			break
		}
		floor = max(floor, c.floor)
	}
	tx, err := b.beginAt(floor)
	if err != nil {
		tell(err)
		return nil
	}
	for i, c := range calls {
		n := len(tx.hooks)
		if err := c.fn(tx); err != nil {
			b.releasing()
			if len(calls) == 1 {
				c.done <- err // alone already: its own error, nothing written
				return nil
			}
			c.done <- errRunAlone
			return append(calls[:i:i], calls[i+1:]...)
		}
		c.hooks = tx.hooks[n:len(tx.hooks):len(tx.hooks)]
	}
	ok, err := tx.commit()
	switch {
	case errors.Is(err, errTooLarge):
		tell(errRunAlone) // together too large; alone each may fit
	case err != nil:
		tell(err) // maybe committed: as with update, the callers read back
	case !ok:
		b.conflicts.count(tx)
		tell(errRunAlone)
	default:
		tell(nil)
	}
	return nil
}

// releasing tells the gather, before the group under way tells a call its outcome, how
// many calls wait behind the group (gather.releasing).
func (b *etcdBackend) releasing() {
	b.group.mu.Lock()
	b.group.gather.releasing(len(b.group.waiting))
	b.group.mu.Unlock()
}
