package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// errStopped ends a run's goroutine when the registry stops: the run stays as stored.
var errStopped = errors.New("the workflow engine is stopping")

// The phases as rendered steps name them.
const phaseCleanup = "cleanup"

// drive runs a stored run from where it is to its end.
func (e *Engine) drive(ctx context.Context, id string) error {
	for ctx.Err() == nil {
		run, err := e.load(id)
		if err != nil || run.State != store.RunRunning {
			return err
		}
		i := slices.IndexFunc(run.Steps, func(s store.RunStep) bool { return !s.Terminal() })
		if i < 0 {
			return e.end(run)
		}
		failed, err := failingStep(run)
		if err != nil {
			return err
		}
		if failed != nil && run.Steps[i].Phase != phaseCleanup {
			_, err := e.update(id, func(r *store.Run) error {
				s := &r.Steps[i]
				s.State, s.Reason = store.StepSkipped, "not run: "+failed.Path()+" failed"
				return nil
			})
			if err != nil {
				return err
			}
			continue
		}
		if err := e.runStep(ctx, id, i); errors.Is(err, errStopped) {
			return nil
		} else if err != nil {
			return err
		}
	}
	return nil
}

// failingStep returns the first step that failed and whose onFailure is fail: the step
// that fails the run. nil when there is none.
func failingStep(run store.Run) (*store.RunStep, error) {
	for i, s := range run.Steps {
		if s.State != store.StepFailed {
			continue
		}
		spec, err := specOf(s)
		if err != nil {
			return nil, err
		}
		if spec.OnFailure != onFailureContinue {
			return &run.Steps[i], nil
		}
	}
	return nil, nil
}

const onFailureContinue = "continue"

// end records the run's outcome, and what it means for the node, in one transaction.
func (e *Engine) end(run store.Run) error {
	failed, err := failingStep(run)
	if err != nil {
		return err
	}
	var ended store.Run
	err = e.cfg.Store.Update(func(tx *store.Tx) error {
		var err error
		ended, err = tx.UpdateRun(run.ID, func(r *store.Run) error {
			r.State = store.RunSucceeded
			if failed != nil {
				r.State = store.RunFailed
				r.Failure = &store.StepFailure{RunID: r.ID, Step: failed.Path(), Use: failed.Use, Error: failed.Error}
			}
			return nil
		})
		if err != nil {
			return err
		}
		return e.finish[run.Kind](tx, ended)
	})
	if err != nil {
		return err
	}
	e.notify()
	e.cfg.Log.Info("workflow ended", "workflow", run.ID, "node", run.Node, "state", ended.State)
	return nil
}

func (e *Engine) load(id string) (run store.Run, err error) {
	err = e.cfg.Store.View(func(tx *store.Tx) error { run, err = tx.Run(id); return err })
	return run, err
}

// update changes a running run in its own transaction and wakes its watchers.
func (e *Engine) update(id string, change func(*store.Run) error) (run store.Run, err error) {
	err = e.cfg.Store.Update(func(tx *store.Tx) error { run, err = tx.UpdateRun(id, change); return err })
	if err == nil {
		e.notify()
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
