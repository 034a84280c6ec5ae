package store

import (
	"errors"
	"sync"
	"time"
)

const (
	// etcdBatchDelay is how long the first call of a batch waits for others (bbolt's
	// default MaxBatchDelay).
	etcdBatchDelay = 10 * time.Millisecond
	// etcdBatchMax is how many calls one batch takes at most: each small writer reads a
	// key or two, and a transaction keeps one compare per key read up to etcdMaxTxnOps.
	etcdBatchMax = 48
)

// errRunAlone tells a call of a batch to run as a transaction of its own.
var errRunAlone = errors.New("store: run the call alone")

// etcdBatch is the calls of Batch collected for one transaction.
type etcdBatch struct {
	calls []*batchCall
	once  sync.Once
}

type batchCall struct {
	fn   func(kvTx) error
	done chan error // nil: committed; errRunAlone: run it alone; else its error
}

// batch coalesces concurrent calls into one transaction, as bbolt's Batch does: a
// batch runs etcdBatchDelay after its first call or when it has etcdBatchMax calls.
// A call that fails is taken out and run alone (so it returns its own error), and the
// others run again without it; when the commit meets a conflict (another replica wrote
// what one of the calls read), each call runs alone, as update, retrying on its own.
// A call returns only after its writes committed, exactly once.
func (b *etcdBackend) batch(fn func(kvTx) error) error {
	c := &batchCall{fn: fn, done: make(chan error, 1)}
	b.batchMu.Lock()
	p := b.pending
	if p == nil {
		p = &etcdBatch{}
		b.pending = p
		time.AfterFunc(etcdBatchDelay, func() { b.runBatch(p) })
	}
	p.calls = append(p.calls, c)
	if len(p.calls) >= etcdBatchMax {
		b.pending = nil // full: the next call starts a batch of its own
		go b.runBatch(p)
	}
	b.batchMu.Unlock()
	if err := <-c.done; err != errRunAlone {
		return err
	}
	return b.update(fn)
}

// runBatch commits p's calls (once, whichever of the timer and the size came first).
func (b *etcdBackend) runBatch(p *etcdBatch) {
	p.once.Do(func() {
		b.batchMu.Lock()
		if b.pending == p {
			b.pending = nil
		}
		calls := p.calls
		b.batchMu.Unlock()
		for len(calls) > 0 {
			calls = b.tryBatch(calls)
		}
	})
}

// tryBatch runs calls in one transaction and tells each its outcome, but for the calls
// it returns: those run again in a new transaction.
func (b *etcdBackend) tryBatch(calls []*batchCall) []*batchCall {
	tell := func(err error) {
		for _, c := range calls {
			c.done <- err
		}
	}
	tx, err := b.begin(false)
	if err != nil {
		tell(err)
		return nil
	}
	for i, c := range calls {
		if err := c.fn(tx); err != nil {
			c.done <- errRunAlone
			return append(calls[:i:i], calls[i+1:]...)
		}
	}
	ok, err := tx.commit()
	switch {
	case errors.Is(err, errTooLarge):
		tell(errRunAlone) // together too large; alone each may fit
	case err != nil:
		tell(err) // maybe committed: as with update, the callers read back
	case !ok:
		tell(errRunAlone)
	default:
		for _, h := range tx.hooks {
			h()
		}
		tell(nil)
	}
	return nil
}
