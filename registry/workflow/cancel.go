package workflow

import (
	"context"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// errCancelled is the cause an attempt's context is cancelled with when its run is. It
// is a *proto.Error, INVALID_STATE reason cancelled: a relay under way withdraws its
// command with it (Relay).
var errCancelled error = proto.Errorf(proto.InvalidState, "the workflow was cancelled").WithReason(proto.ReasonCancelled)

// Cancel marks a running run cancelled in tx: from then on its main and acceptance
// steps are abandoned (the attempt running, once Abort is called after tx commits) or
// skipped, its cleanup runs, and it fails with INVALID_STATE, reason cancelled, at the
// step it was on. A run that has ended is INVALID_STATE.
func (e *Engine) Cancel(tx *store.Tx, id string) (store.Run, error) {
	return halt(tx, id, func(f *store.StepFailure) *proto.Error {
		return proto.Errorf(proto.InvalidState, "workflow %s was cancelled at %s (%s)", id, f.Step, f.Use).WithReason(proto.ReasonCancelled)
	})
}

// Fail marks a running run cancelled in tx as Cancel does, but failing with cause
// instead of reason cancelled: the registry stops a run it can no longer trust (a
// ramdisk token of its presented again from another host). Abort it once tx commits.
func (e *Engine) Fail(tx *store.Tx, id string, cause *proto.Error) (store.Run, error) {
	return halt(tx, id, func(*store.StepFailure) *proto.Error { return cause })
}

// halt marks run id cancelled in tx, at the step it is on, with the error cause makes
// of that failure. A run being cancelled already is INVALID_STATE.
func halt(tx *store.Tx, id string, cause func(*store.StepFailure) *proto.Error) (store.Run, error) {
	return tx.UpdateRun(id, func(r *store.Run) error {
		if r.Cancelled != nil {
			return proto.Errorf(proto.InvalidState, "workflow %s is being cancelled already: its cleanup runs", id).WithReason(proto.ReasonCancelled)
		}
		f := &store.StepFailure{RunID: id}
		for _, s := range r.Steps {
			if !s.Terminal() {
				f.Step, f.Use = s.Path(), s.Use
				break
			}
		}
		f.Error = cause(f)
		r.Cancelled = f
		return nil
	})
}

// Abort abandons the attempt a cancelled run is on, once Cancel has committed. An
// attempt of a cleanup step is never abandoned.
func (e *Engine) Abort(id string) {
	e.mu.Lock()
	abort := e.aborts[id]
	e.mu.Unlock()
	if abort != nil {
		abort(errCancelled)
	}
	e.notify()
}

// abortable returns the context a main or acceptance step of run id runs in, which
// Abort cancels, and the function that unregisters it.
func (e *Engine) abortable(ctx context.Context, id string) (context.Context, func()) {
	sctx, cancel := context.WithCancelCause(ctx)
	e.mu.Lock()
	e.aborts[id] = cancel
	e.mu.Unlock()
	return sctx, func() {
		e.mu.Lock()
		delete(e.aborts, id)
		e.mu.Unlock()
		cancel(nil)
	}
}

// skip is the error a handler returns for a step that should count as skipped.
type skip struct{ reason string }

func (s skip) Error() string { return "skipped: " + s.reason }

// Skip is what a handler returns when its step does not apply to this machine: the step
// is recorded skipped with the reason, and the run goes on.
func Skip(reason string) error { return skip{reason} }
