package workflow

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// TestAnAnswerRecordedBeforeTheTimeoutCounts: an agent that answers a power.setPower as
// the step's timeout runs out, its answer recorded before the relay's withdrawal, has
// its attempt succeed with that answer, and no retry runs the power action again.
// Before, the attempt was recorded TIMEOUT whatever the relay returned, and the retry
// sent the power action a second time though the agent had carried it out.
func TestAnAnswerRecordedBeforeTheTimeoutCounts(t *testing.T) {
	h := newHarness(t, nil)
	h.agent.script = map[string][]outcome{"power.setPower": {{answerAtEnd: true}}}
	id := h.start(doc(`{"use":"power.setPower","with":{"action":"cycle"},"timeout":"30s","retries":1}`, "", ""))
	cmd := attemptID(id, "main", 0, false, 1)
	h.agent.waitRunning(t, cmd)
	h.clock.BlockUntil(1)
	h.clock.Advance(30 * time.Second)
	run := h.attemptsDone(id, 0, 1)
	if s := run.Steps[0]; s.State != store.StepSucceeded || s.Attempts[0].Error != nil || string(s.Result) != `{"answeredAtEnd":true}` {
		t.Fatalf("the step whose agent answered as its timeout ran out: %s, attempt error %v, result %s", summary(run), s.Attempts[0].Error, s.Result)
	}
	if run := h.waitEnd(id); run.State != store.RunSucceeded || len(h.agent.executed()) != 1 {
		t.Errorf("run %s; the agent ran %v, want the power action once", summary(run), h.agent.executed())
	}
}

// TestASupersededAttemptsProgressIsNotRecorded: a deploy's first attempt times out, its
// retry runs and reports its progress, and the agent of the first attempt still reports
// under that attempt's command id. The report is NOT_FOUND and the step keeps the
// retry's progress. Before, it was recorded on the step, as the running attempt's: the
// node's watchers saw the bytes of a stream given up.
func TestASupersededAttemptsProgressIsNotRecorded(t *testing.T) {
	h := newHarness(t, nil)
	h.agent.script = map[string][]outcome{"inventory.refresh": {hold}}
	id := h.start(doc(`{"use":"inventory.refresh","timeout":"30s","retries":1}`, "", ""))
	first, retry := attemptID(id, "main", 0, false, 1), attemptID(id, "main", 0, false, 2)
	h.agent.waitRunning(t, first)
	h.clock.BlockUntil(1)
	h.clock.Advance(30 * time.Second)
	h.backOff(id, 1, 1)
	h.agent.waitRunning(t, retry)
	if err := h.engine.ReportProgress(retry, json.RawMessage(`{"bytesWritten":2048}`)); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{first, first + ":image"} {
		if err := h.engine.ReportProgress(cmd, json.RawMessage(`{"bytesWritten":1}`)); proto.CodeOf(err) != proto.NotFound {
			t.Errorf("progress of %s, an attempt that timed out: %v, want NOT_FOUND", cmd, err)
		}
	}
	if run := h.load(id); string(run.Steps[0].Progress) != `{"bytesWritten":2048}` {
		t.Errorf("the step shows progress %s, want its running attempt's", run.Steps[0].Progress)
	}
	h.agent.release(retry)
	h.waitEnd(id)
}

// TestACancelDuringAFailedRunsCleanupKeepsItsFailure: a run whose main step failed runs
// its cleanup, and is cancelled meanwhile. It ends failed at the step that failed, with
// that step's error, which the node's failure shows. Before, the cancellation replaced
// it: the operator saw "cancelled at cleanup[0]", and not why the run failed.
func TestACancelDuringAFailedRunsCleanupKeepsItsFailure(t *testing.T) {
	h := newHarness(t, nil)
	h.agent.script = map[string][]outcome{"power.getPower": {{fail: true, message: "the BMC refused the session"}}, "inventory.refresh": {hold}}
	id := h.start(doc(`{"use":"power.getPower"}`, "", `{"use":"inventory.refresh"}`))
	cleanup := attemptID(id, "cleanup", 0, false, 1)
	h.agent.waitRunning(t, cleanup)
	if err := h.store.Update(func(tx *store.Tx) error { _, err := h.engine.Cancel(tx, id); return err }); err != nil {
		t.Fatal(err)
	}
	h.engine.Abort(id)
	h.agent.release(cleanup)
	run := h.waitEnd(id)
	if f := run.Failure; run.State != store.RunFailed || f == nil || f.Step != "steps[0]" || f.Error.Code != proto.DriverError || f.Error.Message != "the BMC refused the session" {
		t.Errorf("the run ends %s with failure %+v, want steps[0]'s DRIVER_ERROR", summary(run), f)
	}
}
