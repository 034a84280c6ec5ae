package workflow

import (
	"context"
	"maps"
	"slices"

	"github.com/better-compute/better-compute/registry/store"
)

// claim takes the run's claim for this engine: true when it holds it now (or runs
// without Claims), false when another registry drives the run.
func (e *Engine) claim(id string) bool {
	if e.cfg.Claims == nil {
		return true
	}
	var ok bool
	err := e.cfg.Store.Update(func(tx *store.Tx) (err error) {
		ok, err = tx.ClaimRun(id, e.claimant(), e.cfg.Claims.TTL)
		return err
	})
	if err != nil {
		e.cfg.Log.Error("claiming a workflow", "workflow", id, "err", err)
	}
	return err == nil && ok
}

// claimant is the run of the registry this engine claims runs as: its owner, started
// when this run of it started.
func (e *Engine) claimant() store.Holder {
	return store.Holder{Replica: e.cfg.Claims.Owner, Started: e.cfg.Claims.Started}
}

// release gives up the run's claim, once this engine stopped driving it: another
// registry may take it at once.
func (e *Engine) release(id string) {
	if e.cfg.Claims == nil {
		return
	}
	if err := e.cfg.Store.Update(func(tx *store.Tx) error { return tx.ReleaseRun(id, e.claimant()) }); err != nil {
		e.cfg.Log.Warn("releasing a workflow's claim", "workflow", id, "err", err)
	}
}

// fence is in every transaction that drives a run: it renews this engine's claim, or
// fails with errClaimLost when another registry holds it, or a later run of this one,
// so that a registry that lost a run (paused past its claim's expiry, or still up after
// its restart) changes nothing of it.
func (e *Engine) fence(tx *store.Tx, id string) error {
	if e.cfg.Claims == nil {
		return nil
	}
	ok, err := tx.ClaimRun(id, e.claimant(), e.cfg.Claims.TTL)
	if err == nil && !ok {
		err = errClaimLost
	}
	return err
}

// keepClaims renews the claims of the runs this engine drives (renew), and starts the
// runs no registry drives (their claim expired: the registry that drove them died),
// every third of the claims' TTL until ctx ends. A run whose claim another registry
// took is stopped where it is.
func (e *Engine) keepClaims(ctx context.Context) {
	for {
		t := e.cfg.Clock.NewTimer(e.cfg.Claims.TTL / 3)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		e.mu.Lock()
		driving := make(map[string]context.CancelCauseFunc, len(e.running))
		for id, stop := range e.running {
			driving[id] = stop
		}
		e.mu.Unlock()
		lost, cancelled, err := e.renew(driving)
		if err != nil {
			e.cfg.Log.Error("renewing the workflows' claims", "err", err)
		}
		for _, id := range lost {
			driving[id](errClaimLost)
		}
		for _, id := range cancelled {
			e.Abort(id)
		}
		if err := e.startUnclaimed(); err != nil {
			e.cfg.Log.Error("looking for workflows to take over", "err", err)
		}
	}
}

// renewChunk is the most runs renew renews in one transaction. Each reads the run's
// claim and record, and writes the claim: 32 keep a transaction's compares under etcd's
// 128, one per key read, so that it conflicts only with a write of those runs, and its
// writes far under what one transaction takes.
const renewChunk = 32

// renew renews the claims of the runs driving names, renewChunk runs a transaction
// (none when it names none), and returns those another registry holds, and those
// cancelled: a cancel another registry took (its Abort reaches only the attempts it
// drives itself) abandons the attempt here within a third of the claims' TTL. Each
// claim stands alone, so nothing asks for one transaction: one of every run an engine
// drives wrote a claim a run, and etcd refused it past 4,094 runs; past 63 its
// compares fell back to the buckets' generations, and any write of any run, by any
// replica, conflicted with it, so that with a thousand or two runs of a fleet going on
// it met a conflict at each of its tries. Either way no claim was renewed, and each
// expired 30 s after its run last wrote, for another registry to take over. The first
// transaction that fails ends the renewal (the store does not answer, say), its error
// returned with the lost and cancelled runs of those before it.
func (e *Engine) renew(driving map[string]context.CancelCauseFunc) (lost, cancelled []string, err error) {
	for chunk := range slices.Chunk(slices.Sorted(maps.Keys(driving)), renewChunk) {
		l, c, err := e.renewAll(chunk)
		if err != nil {
			return lost, cancelled, err
		}
		lost, cancelled = append(lost, l...), append(cancelled, c...)
	}
	return lost, cancelled, nil
}

// renewAll renews the claims of the runs ids in one transaction, as renew says. A run
// that ended, as the transaction reads it, is left alone: its end released its claim (or
// is about to), and a renewal after that release wrote the claim of an ended run again,
// kept until the run was pruned.
func (e *Engine) renewAll(ids []string) (lost, cancelled []string, err error) {
	err = e.cfg.Store.Update(func(tx *store.Tx) error {
		lost, cancelled = lost[:0], cancelled[:0]
		for _, id := range ids {
			run, err := tx.Run(id)
			if err != nil {
				return err
			}
			if run.State != store.RunRunning {
				continue // it ended since driving was read: its claim is released, or about to be
			}
			if err := e.fence(tx, id); err == errClaimLost {
				lost = append(lost, id)
				continue
			} else if err != nil {
				return err
			}
			if run.Cancelled != nil {
				cancelled = append(cancelled, id)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return lost, cancelled, nil
}

// startUnclaimed starts the running runs of the store whose claim no other registry
// holds: those it reads as held are left alone, without a write.
func (e *Engine) startUnclaimed() error {
	var free []string
	err := e.cfg.Store.View(func(tx *store.Tx) error {
		ids, err := tx.RunningRuns()
		if err != nil {
			return err
		}
		free = free[:0]
		for _, id := range ids {
			c, held, err := tx.RunClaim(id)
			if err != nil {
				return err
			}
			if !held || c.HeldBy(e.claimant()) || !tx.Now().Before(c.Expires) {
				free = append(free, id)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range free {
		e.Start(id)
	}
	return nil
}
