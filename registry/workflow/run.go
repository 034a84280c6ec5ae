package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// errStopped ends a run's goroutine when the registry stops: the run stays as stored.
var errStopped = errors.New("the workflow engine is stopping")

// The phases as rendered steps name them.
const phaseCleanup = "cleanup"

// drive runs a stored run from where it is to its end; a run without a plan (errNoPlan)
// ends failed at once.
func (e *Engine) drive(ctx context.Context, id string) error {
	pl, err := e.drives(id)
	if errors.Is(err, errNoPlan) {
		return e.unplanned(id, err)
	}
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		run, err := e.load(id)
		if err != nil || run.State != store.RunRunning {
			return err
		}
		i := slices.IndexFunc(run.Steps, func(s store.RunStep) bool { return !s.Terminal() })
		if i < 0 {
			return e.end(run, pl.steps)
		}
		if run.Cancelled != nil && run.Steps[i].Phase != phaseCleanup {
			if err := e.abandonStep(run, i); err != nil {
				return err
			}
			continue
		}
		if failed := failingStep(run, pl.steps); failed != nil && run.Steps[i].Phase != phaseCleanup {
			_, err := e.update(id, func(r *store.Run) error {
				for _, j := range notRunFrom(*r, i) {
					s := &r.Steps[j]
					s.State, s.Reason = store.StepSkipped, "not run: "+failed.Path()+" failed"
				}
				return nil
			})
			if err != nil {
				return err
			}
			continue
		}
		if err := e.runStep(ctx, id, i, pl); errors.Is(err, errStopped) {
			return nil
		} else if err != nil {
			return err
		}
	}
	return nil
}

// notRunFrom are the steps from i on that a cancelled run, or one whose failed step
// ends its main steps, does not run: those not done and not of the cleanup phase. The
// drive met them one by one, each in a write of its own (383 rewrites of a record near
// its bound for a run of the most steps); they are changed in one.
func notRunFrom(r store.Run, i int) []int {
	var js []int
	for j := i; j < len(r.Steps); j++ {
		if !r.Steps[j].Terminal() && r.Steps[j].Phase != phaseCleanup {
			js = append(js, j)
		}
	}
	return js
}

// driveOut drives run id to its end, unless ctx ends or another registry takes the run
// over. When the drive fails for a reason that may pass (store.Transient: the etcd
// cluster did not answer, or did not confirm a commit), the run is driven again from
// what the store holds, after a pause that grows with each such failure in a row
// (storeRetry). Any other failure would come again (a transaction the store refuses,
// too large for the cluster; a record it cannot read): the run fails with it (failStuck),
// so that no run stays running with nothing driving it.
func (e *Engine) driveOut(ctx context.Context, id string) {
	for failures := 0; ; {
		err := e.drive(ctx, id)
		if err != nil && ctx.Err() == nil && !errors.Is(err, errClaimLost) && !store.Transient(err) {
			if err = e.failStuck(id, err); err == nil {
				failures = 0
				continue
			}
		}
		switch {
		case errors.Is(err, errClaimLost) || context.Cause(ctx) == errClaimLost:
			e.cfg.Log.Warn("workflow taken over by another registry", "workflow", id)
			return
		case err == nil || ctx.Err() != nil:
			return
		case store.Transient(err):
			failures++
			wait := storeRetry(failures)
			e.cfg.Log.Warn("workflow: the store did not take a write; driving it again", "workflow", id, "retryIn", wait, "err", err)
			if clock.Sleep(ctx, e.cfg.Clock, wait) != nil {
				return
			}
		default:
			e.cfg.Log.Error("workflow stopped: its failure could not be recorded either", "workflow", id, "err", err)
			return
		}
	}
}

// storeRetry is the pause before a run is driven again after its n-th failure in a row
// that may pass: 1 second after the first, doubling, at most a minute.
func storeRetry(n int) time.Duration {
	return min(time.Second<<min(n-1, 6), time.Minute)
}

// failStuck fails run id, which its driver cannot take further (cause), in a transaction
// of its own that writes little: as Fail does, at the step it is on, so that its cleanup
// runs; or, when it is being cancelled or failed already (its cleanup or its end is what
// cannot go on), at once, every step not done abandoned (abandonAll). A run that has
// ended (what failed came after its end) is left as it is.
func (e *Engine) failStuck(id string, cause error) error {
	var run store.Run
	err := e.cfg.Store.Update(func(tx *store.Tx) (err error) {
		if err := e.fence(tx, id); err != nil {
			return err
		}
		if run, err = tx.Run(id); err != nil || run.State != store.RunRunning || run.Cancelled != nil {
			return err
		}
		_, err = halt(tx, id, func(f *store.StepFailure) *proto.Error {
			if f.Step == "" {
				return proto.Errorf(proto.Internal, "workflow %s fails at its end, as the registry could not record it: %v", id, cause)
			}
			return proto.Errorf(proto.Internal, "workflow %s fails at %s (%s), as the registry could not go on with it: %v", id, f.Step, f.Use, cause)
		})
		return err
	})
	switch {
	case err != nil:
		return err
	case run.State != store.RunRunning:
		e.cfg.Log.Error("workflow ended, and what follows its end failed", "workflow", id, "err", cause)
		return nil
	case run.Cancelled == nil:
		e.cfg.Log.Error("workflow cannot go on: it fails, and its cleanup runs", "workflow", id, "err", cause)
		return nil
	}
	e.cfg.Log.Error("workflow cannot go on: it fails at once", "workflow", id, "err", cause)
	return e.abandonAll(id, proto.Errorf(proto.Internal, "workflow %s fails at once, as the registry could not go on with it: %v", id, cause),
		"not run: the registry could not go on with the workflow")
}

// notRunCancelled is why a step of a cancelled run that never started is skipped.
const notRunCancelled = "not run: the workflow was cancelled"

// unplanned ends a run whose steps cannot be rendered (errNoPlan, cause), so that none
// of them can run, its cleanup included (abandonAll).
func (e *Engine) unplanned(id string, cause error) error {
	e.cfg.Log.Error("workflow failed: its steps cannot be rendered from its profile", "workflow", id, "err", cause)
	return e.abandonAll(id, cause, "not run: "+errNoPlan.Error())
}

// abandonAll ends run id at once, failing with cause: each step not done, its cleanup
// included, is skipped with reason, and the one running fails with cause
// (store.RunStep.Abandon); the run fails as it was cancelled, or, when it was not, with
// cause.
func (e *Engine) abandonAll(id string, cause error, reason string) error {
	run, err := e.write(id, true, func(tx *store.Tx, r *store.Run) error {
		f := &store.StepFailure{RunID: id, Error: proto.AsError(cause)}
		var ended []int
		for i := range r.Steps {
			if s := &r.Steps[i]; !s.Terminal() {
				if f.Step == "" {
					f.Step, f.Use = s.Path(), s.Use
				}
				if s.AttemptOpen() {
					ended = append(ended, i)
				}
				s.Abandon(f.Error, reason, e.cfg.Clock.Now())
			}
		}
		// A run cancelled already keeps its cancellation, whose room its halt took
		// (store's haltRoom); its step says what stopped its cleanup.
		if r.Cancelled == nil {
			r.Cancelled = f
		}
		// The attempts ended here are recorded as any attempt's end is (record).
		if len(ended) == 0 || e.cfg.Relay == nil {
			return nil
		}
		node, err := tx.Node(r.Node)
		for _, i := range ended {
			if err == nil {
				err = e.recorded(tx, node, r, i)
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	return e.end(run, nil)
}

// failingStep returns the first step that failed and whose onFailure (of its rendered
// step in steps) is fail: the step that fails the run. nil when there is none.
func failingStep(run store.Run, steps []profile.RenderedStep) *store.RunStep {
	for i, s := range run.Steps {
		if s.State == store.StepFailed && steps[i].OnFailure != onFailureContinue {
			return &run.Steps[i]
		}
	}
	return nil
}

const onFailureContinue = "continue"

// failedBeforeItsCancel reports whether failed, the step that fails cancelled run,
// failed before the cancel (Cancel: reason cancelled) came: it comes before the step
// the run was on then (store.StepFailure.Step; none once every step was done). A run
// the registry failed (Fail, failStuck) fails with why it did.
func failedBeforeItsCancel(run store.Run, failed *store.RunStep) bool {
	if failed == nil || run.Cancelled.Error == nil || run.Cancelled.Error.Details.Reason != proto.ReasonCancelled {
		return false
	}
	for _, s := range run.Steps {
		switch s.Path() {
		case run.Cancelled.Step:
			return false
		case failed.Path():
			return true
		}
	}
	return false
}

// end records the run's outcome, and what it means for the node, in one transaction:
// failed as it was cancelled, else at its failing step (of its rendered steps; none
// known when nil), else with the failure its end check finds (EndCheck). A step that
// failed the run before its cancel came (its cleanup running) is the run's failure
// still: the cancel stopped nothing, and the operator reads why the run failed.
func (e *Engine) end(run store.Run, steps []profile.RenderedStep) error {
	var failed *store.RunStep
	if steps != nil {
		failed = failingStep(run, steps)
	}
	if run.Cancelled != nil && !failedBeforeItsCancel(run, failed) {
		failed = nil
	}
	var old, ended store.Run
	dropped := 0
	err := e.cfg.Store.Update(func(tx *store.Tx) error {
		if err := e.fence(tx, run.ID); err != nil {
			return err
		}
		atEnd, err := e.checkEnd(tx, run.ID, failed)
		if err != nil {
			return err
		}
		old, ended, err = updateRun(tx, run.ID, func(r *store.Run) error {
			r.State = store.RunSucceeded
			switch {
			case failed != nil:
				r.State = store.RunFailed
				r.Failure = &store.StepFailure{RunID: r.ID, Step: failed.Path(), Use: failed.Use, Error: failed.Error}
			case r.Cancelled != nil:
				r.State, r.Failure = store.RunFailed, r.Cancelled
			case atEnd != nil:
				r.State, r.Failure = store.RunFailed, atEnd
			}
			return nil
		})
		if err != nil {
			return err
		}
		// A command an abandoned or timed-out attempt left pending is never delivered.
		if dropped, err = e.dropPending(tx, run); err != nil {
			return err
		}
		return e.finish[run.Kind](tx, ended)
	})
	if err != nil {
		return err
	}
	e.observe(old, ended)
	e.cfg.Log.Info("workflow ended", "workflow", run.ID, "node", run.Node, "state", ended.State, "unansweredCommandsDropped", dropped)
	return e.startNext(run)
}

// checkEnd is the failure the EndCheck of run id's kind finds at the end of the run, nil
// when none (or none is registered), read in tx before the run is recorded ended; a run
// that failed at a step (failed), or was cancelled, is not checked: it fails anyway.
func (e *Engine) checkEnd(tx *store.Tx, id string, failed *store.RunStep) (*store.StepFailure, error) {
	run, err := tx.Run(id)
	if err != nil || failed != nil || run.Cancelled != nil || e.checks[run.Kind] == nil {
		return nil, err
	}
	return e.checks[run.Kind](tx, run)
}

// startNext starts the run the end of run created for its node (the next request of a
// chain), once the end has committed.
func (e *Engine) startNext(run store.Run) error {
	node, err := e.node(run.Node)
	if err != nil || node.Workflow == run.ID || node.Workflow == "" {
		return err
	}
	next, err := e.load(node.Workflow)
	if err == nil && next.State == store.RunRunning {
		e.Start(next.ID)
	}
	return err
}

func (e *Engine) load(id string) (run store.Run, err error) {
	err = e.cfg.Store.View(func(tx *store.Tx) error { run, err = tx.Run(id); return err })
	return run, err
}

// update changes a running run as its driver, in its own transaction, and wakes its
// watchers: with Claims, only while this engine holds the run's claim.
func (e *Engine) update(id string, change func(*store.Run) error) (store.Run, error) {
	return e.write(id, true, func(_ *store.Tx, r *store.Run) error { return change(r) })
}

// write changes a running run in its own transaction, as its driver (fenced: see fence)
// or not, and writes the events of the change; its commit wakes the run's watchers.
// change reads what else it needs in the same transaction.
func (e *Engine) write(id string, driver bool, change func(*store.Tx, *store.Run) error) (run store.Run, err error) {
	var old store.Run
	err = e.cfg.Store.Update(func(tx *store.Tx) error {
		if driver {
			if err := e.fence(tx, id); err != nil {
				return err
			}
		}
		old, run, err = updateRun(tx, id, func(r *store.Run) error { return change(tx, r) })
		return err
	})
	if err == nil {
		e.observe(old, run)
	}
	return run, err
}

// specOf decodes the rendered step a run froze.
func specOf(s store.RunStep) (profile.RenderedStep, error) {
	var spec profile.RenderedStep
	if err := json.Unmarshal(s.Spec, &spec); err != nil {
		return spec, proto.Errorf(proto.Internal, "%s: the stored step does not decode: %w", s.Path(), err)
	}
	return spec, nil
}
