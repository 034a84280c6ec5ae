package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// notify wakes everyone waiting for a run to change.
func (e *Engine) notify() {
	e.mu.Lock()
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

// Watch returns the run once its rev is past afterRev or it has ended, or as it is when
// ctx ends first. An afterRev of 0 returns it at once. Each step's Spec holds its rendered
// step: as a run stored before kept it, else rendered from the run's document (none when
// the document no longer renders the run's steps: errNoPlan).
func (e *Engine) Watch(ctx context.Context, id string, afterRev int) (store.Run, error) {
	for {
		e.mu.Lock()
		changed := e.changed
		e.mu.Unlock()
		run, err := e.load(id)
		if err != nil {
			return run, err
		}
		if run.Rev > afterRev || run.State != store.RunRunning {
			return e.withSpecs(run)
		}
		select {
		case <-ctx.Done():
			return e.withSpecs(run)
		case <-changed:
		}
	}
}

// withSpecs is run with each step's rendered step in its Spec.
func (e *Engine) withSpecs(run store.Run) (store.Run, error) {
	if len(run.Steps) == 0 || len(run.Steps[0].Spec) > 0 {
		return run, nil
	}
	pl, err := e.plan(run)
	if errors.Is(err, errNoPlan) {
		return run, nil
	}
	if err != nil {
		return run, err
	}
	if pl.specs == nil {
		if pl.specs, err = specsOf(pl.steps); err != nil {
			return run, err
		}
	}
	for i := range pl.steps {
		run.Steps[i].Spec = pl.specs[i]
	}
	return run, nil
}

// ReportProgress records progress detail an agent reported for a command of a running
// step's running attempt (for example the bytes deploy.deploy has written), for watchers
// to show; sent is the payload the command carried, which bounds what the detail counts
// (deployStreamed). A command of no running attempt is NOT_FOUND: that of an attempt that timed
// out or was withdrawn, whose agent may still report, would overwrite the progress of
// the attempt that runs now. A detail over proto.MaxProgressDetail, or one the run's
// record cannot keep (store.RunTooLarge), is INVALID_INPUT and not recorded.
func (e *Engine) ReportProgress(commandID string, sent, detail json.RawMessage) error {
	id, phase, index, err := stepOf(commandID)
	if err != nil {
		return err
	}
	if len(detail) > proto.MaxProgressDetail {
		return proto.Errorf(proto.InvalidInput, "the progress of command %s takes %d bytes, more than the %d recorded", commandID, len(detail), proto.MaxProgressDetail).WithPath("progress").WithReason(proto.ReasonTooLarge)
	}
	var location string
	var read, written int64
	// The agent may be connected to another registry than the run's driver.
	_, err = e.write(id, false, func(_ *store.Tx, r *store.Run) error {
		for i := range r.Steps {
			s := &r.Steps[i]
			if s.Phase == phase && s.Index == index && s.State == store.StepRunning && runningAttempt(*s, commandID) {
				a := &s.Attempts[len(s.Attempts)-1]
				location, read, written = deployStreamed(a.Streamed, detail, sent)
				a.Streamed.Read += read
				a.Streamed.Written += written
				s.Progress = detail
				return nil
			}
		}
		return proto.Errorf(proto.NotFound, "command %s is not of a running step's running attempt", commandID)
	})
	if err == nil && location != "" && e.cfg.Observer != nil {
		e.cfg.Observer.DeployStreamed(location, read, written)
	}
	return err
}

// runningAttempt reports whether commandID is a command of step s's attempt that runs
// (its last, not finished): the attempt's id, or one under it (subCommandID).
func runningAttempt(s store.RunStep, commandID string) bool {
	if !s.AttemptOpen() {
		return false
	}
	a := s.Attempts[len(s.Attempts)-1].CommandID
	return commandID == a || strings.HasPrefix(commandID, a+":")
}

// deployStreamed is what a deploy.image's progress report adds to what the command's
// reports counted before (counted, the attempt's store.Streamed): the bytes of the image
// read and written to the disk past the most counted, and where the image streams from
// (proto.DeployFromCache or proto.DeployFromSource; "other" for anything else an agent
// says, so the metrics' labels stay bounded). Any other progress is "". A report behind
// the most counted (the stream restarted) adds nothing until it passes it, however often
// it goes back. Each figure of a report counts up to what the deploy.image the registry
// sent (sent, its payload) can read and write (proto.DeployImage.ProgressBounds): an
// agent's figure of 2^63 bytes, or its stream restarted again and again, adds no more
// than the image holds.
func deployStreamed(counted store.Streamed, now, sent json.RawMessage) (location string, read, written int64) {
	var cur proto.DeployImageProgress
	if json.Unmarshal(now, &cur) != nil || cur.Location == "" {
		return "", 0, 0
	}
	var in proto.DeployImage
	json.Unmarshal(sent, &in)
	readMax, writtenMax := in.ProgressBounds()
	past := func(n, most, mark int64) int64 { return max(min(n, most)-mark, 0) }
	location = cur.Location
	if location != proto.DeployFromCache && location != proto.DeployFromSource {
		location = "other"
	}
	return location, past(cur.Read, readMax, counted.Read), past(cur.BytesWritten, writtenMax, counted.Written)
}
