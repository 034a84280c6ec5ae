package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/labelexpr"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// runStep runs step i of a run to its end: skipped when its when does not hold, else
// tried up to 1 + retries times, then its fallback's tries, each try recorded before it
// starts and after it ends. A try that was running when the registry stopped is tried
// again under the same command id.
func (e *Engine) runStep(ctx context.Context, id string, i int, pl plan) error {
	err := e.runStepOnce(ctx, id, i, pl)
	if errors.Is(err, errCancelled) {
		return nil
	}
	return err
}

// runStepOnce is runStep until it ends or its run is cancelled (errCancelled): a main
// or acceptance step runs in a context Abort cancels.
func (e *Engine) runStepOnce(ctx context.Context, id string, i int, pl plan) error {
	run, err := e.load(id)
	if err != nil {
		return err
	}
	if run.Steps[i].Phase != phaseCleanup {
		var done func()
		ctx, done = e.abortable(ctx, id)
		defer done()
		if run, err = e.load(id); err != nil || run.Cancelled != nil {
			return err
		}
	}
	spec := pl.steps[i]
	node, err := e.node(run.Node)
	if err != nil {
		return err
	}
	if run.Steps[i].State == store.StepPending {
		holds, err := when(spec.When, node.Labels)
		if err != nil {
			return err
		}
		run, err = e.update(id, func(r *store.Run) error {
			s := &r.Steps[i]
			if !holds {
				s.State, s.Reason = store.StepSkipped, "when "+spec.When+" does not hold for the node's labels"
				return nil
			}
			s.State, s.StartedAt = store.StepRunning, e.cfg.Clock.Now()
			return nil
		})
		if err != nil || !holds {
			return err
		}
		e.cfg.Log.Info("step started", "workflow", id, "node", node.ID, "step", run.Steps[i].Path(), "use", spec.Use)
	}
	// A fallback whose when does not hold never starts; one that started goes on.
	fallbackHolds := false
	if spec.Fallback != nil {
		if fallbackHolds, err = when(spec.Fallback.When, node.Labels); err != nil {
			return err
		}
	}
	readExpired := false
	for {
		s := run.Steps[i]
		m := e.nextMove(spec, fallbackHolds, s.Attempts)
		if m.exhausted {
			_, err := e.update(id, func(r *store.Run) error {
				s := &r.Steps[i]
				s.State, s.Error, s.FinishedAt = store.StepFailed, s.Attempts[len(s.Attempts)-1].Error, e.cfg.Clock.Now()
				return nil
			})
			return err
		}
		if !m.resume {
			if err := e.sleepUntil(ctx, m.after); err != nil {
				return err
			}
			cmd := commandID(id, s.Phase, s.Index, m.fallback, m.n)
			// The attempt keeps the boot the machine's agent was of as it started, read in
			// the transaction that records its start: a rejoin it waits for is of another.
			// It starts with no progress: the step's was the attempt's before.
			run, err = e.write(id, true, func(tx *store.Tx, r *store.Run) error {
				boot, err := machineBoot(tx, r.Node)
				s := &r.Steps[i]
				s.Attempts = append(s.Attempts, store.Attempt{Fallback: m.fallback, N: m.n, CommandID: cmd, BootID: boot, StartedAt: e.cfg.Clock.Now()})
				s.Progress = nil
				return err
			})
			if err != nil {
				return err
			}
		}
		att := run.Steps[i].Attempts[len(run.Steps[i].Attempts)-1]
		tried := spec
		if att.Fallback {
			tried = *spec.Fallback
		}
		result, failure := e.attempt(ctx, run, node, i, pl, tried, att, readExpired)
		if failure == errStopped || failure == errCancelled {
			return failure
		}
		skipped, isSkip := failure.(skip)
		record := func(r *store.Run) error {
			s := &r.Steps[i]
			a, err := ranAttempt(r, i, att.CommandID)
			if err != nil {
				return err
			}
			a.FinishedAt = e.cfg.Clock.Now()
			if isSkip {
				s.State, s.Reason, s.FinishedAt = store.StepSkipped, skipped.reason, a.FinishedAt
				return nil
			}
			if failure != nil {
				a.Error = proto.AsError(failure)
				return nil
			}
			s.State, s.Result, s.ViaFallback, s.FinishedAt = store.StepSucceeded, result, a.Fallback, a.FinishedAt
			return nil
		}
		var recorded store.Run
		if _, ok := failure.(expired); ok {
			recorded, err = e.recordExpired(id, node, i, record)
		} else {
			recorded, err = e.record(id, node, i, record)
		}
		if errors.Is(err, errAnsweredFirst) {
			// The attempt runs again, to read what its agent answered.
			readExpired = true
			continue
		}
		run, readExpired = recorded, false
		if failure == nil && store.RunTooLarge(err) {
			// A result the run cannot keep fails the attempt, as an answer too large
			// to take does.
			failure = err
			run, err = e.record(id, node, i, record)
		}
		if err != nil || run.Steps[i].State != store.StepRunning {
			return err
		}
		e.cfg.Log.Warn("step attempt failed", "workflow", id, "node", node.ID, "step", s.Path(), "use", tried.Use,
			"attempt", att.N, "fallback", att.Fallback, "err", failure)
	}
}

// ranAttempt is step i's open attempt in r when it is the attempt id this drive ran,
// to record what that attempt made. Otherwise it is errClaimLost: while this registry
// was paused another took the run over, ended the attempt and went on, then let its
// claim expire too (it died), so that this registry's fence took the run back; what
// it made of its attempt is no answer of the step's open one, which its next drive of
// the run resumes.
func ranAttempt(r *store.Run, i int, id string) (*store.Attempt, error) {
	s := &r.Steps[i]
	if !s.AttemptOpen() || s.Attempts[len(s.Attempts)-1].CommandID != id {
		return nil, fmt.Errorf("%w: attempt %s of %s ended while this registry drove it", errClaimLost, id, s.Path())
	}
	return &s.Attempts[len(s.Attempts)-1], nil
}

// move is what comes after a step's attempts so far.
type move struct {
	// resume: the last attempt did not finish; run it again as it is.
	resume bool
	// exhausted: every try of the step and of its fallback failed.
	exhausted bool
	// Otherwise the next attempt: of the fallback or not, its number, and the time it
	// may start.
	fallback bool
	n        int
	after    time.Time
}

// nextMove decides the next attempt of a step from the attempts so far: the step's own
// tries up to 1 + retries with backoff between them, then the fallback's (when there is
// one and its when holds) in the same way.
func (e *Engine) nextMove(spec profile.RenderedStep, fallbackHolds bool, attempts []store.Attempt) move {
	if len(attempts) == 0 {
		return move{n: 1}
	}
	last := attempts[len(attempts)-1]
	switch {
	case last.FinishedAt.IsZero():
		return move{resume: true}
	case !last.Fallback && last.N <= spec.Retries:
		return move{n: last.N + 1, after: last.FinishedAt.Add(e.cfg.Backoff(last.N))}
	case !last.Fallback && spec.Fallback != nil && fallbackHolds:
		return move{fallback: true, n: 1, after: last.FinishedAt}
	case last.Fallback && last.N <= spec.Fallback.Retries:
		return move{fallback: true, n: last.N + 1, after: last.FinishedAt.Add(e.cfg.Backoff(last.N))}
	}
	return move{exhausted: true}
}

// sleepUntil waits until the clock reads t.
func (e *Engine) sleepUntil(ctx context.Context, t time.Time) error {
	d := t.Sub(e.cfg.Clock.Now())
	if d <= 0 {
		return nil
	}
	if clock.Sleep(ctx, e.cfg.Clock, d) == nil {
		return nil
	}
	if context.Cause(ctx) == errCancelled {
		return errCancelled
	}
	return errStopped
}

// when evaluates a step's canonical label expression ("" always holds).
func when(expr string, labels map[string]string) (bool, error) {
	if expr == "" {
		return true, nil
	}
	x, err := labelexpr.Parse(expr)
	if err != nil {
		return false, proto.Errorf(proto.Internal, "a rendered when does not parse: %w", err)
	}
	return x.Eval(labels), nil
}

func (e *Engine) node(id string) (n store.Node, err error) {
	err = e.cfg.Store.View(func(tx *store.Tx) error { n, err = tx.Node(id); return err })
	return n, err
}
