package workflow

import (
	"context"
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
	if err := h.engine.ReportProgress(retry, nil, json.RawMessage(`{"bytesWritten":2048}`)); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{first, first + ":image"} {
		if err := h.engine.ReportProgress(cmd, nil, json.RawMessage(`{"bytesWritten":1}`)); proto.CodeOf(err) != proto.NotFound {
			t.Errorf("progress of %s, an attempt that timed out: %v, want NOT_FOUND", cmd, err)
		}
	}
	if run := h.load(id); string(run.Steps[0].Progress) != `{"bytesWritten":2048}` {
		t.Errorf("the step shows progress %s, want its running attempt's", run.Steps[0].Progress)
	}
	h.agent.release(retry)
	h.waitEnd(id)
}

// TestARetryStartsWithoutTheProgressOfTheAttemptBefore: a deploy's first attempt
// reports 90% of its image written and times out; its retry starts and has reported
// nothing yet. The step shows no progress, as the retry has made none. Before, it
// showed the first attempt's 90% for the retry (workflows get, nodes deploy --wait, the
// console) until the retry's own first report.
func TestARetryStartsWithoutTheProgressOfTheAttemptBefore(t *testing.T) {
	h := newHarness(t, nil)
	h.agent.script = map[string][]outcome{"inventory.refresh": {hold}}
	id := h.start(doc(`{"use":"inventory.refresh","timeout":"30s","retries":1}`, "", ""))
	first, retry := attemptID(id, "main", 0, false, 1), attemptID(id, "main", 0, false, 2)
	h.agent.waitRunning(t, first)
	if err := h.engine.ReportProgress(first, nil, json.RawMessage(`{"bytesWritten":943718400,"sizeBytes":1048576000}`)); err != nil {
		t.Fatal(err)
	}
	h.clock.BlockUntil(1)
	h.clock.Advance(30 * time.Second)
	h.backOff(id, 1, 1)
	h.agent.waitRunning(t, retry)
	if run := h.load(id); len(run.Steps[0].Progress) > 0 {
		t.Errorf("the retry that reported nothing yet shows progress %s", run.Steps[0].Progress)
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

// TestAnAnswerStoredBeforeTheTimeoutCountsOnResume: the registry stops while a
// power.setPower runs at the agent; the agent's answer is recorded in the store (the
// relay's delivery committed it, and the registry stopped before its step recorded the
// attempt); the registry starts again after the step's timeout ran out. The resumed
// attempt reads the answer and succeeds, and no retry runs the power action again.
// Before, it failed TIMEOUT at once, over the answer the store held, and the retry
// power-cycled the machine a second time.
func TestAnAnswerStoredBeforeTheTimeoutCountsOnResume(t *testing.T) {
	h := newHarness(t, nil)
	h.agent.script = map[string][]outcome{"power.setPower": {hold}}
	id := h.start(doc(`{"use":"power.setPower","with":{"action":"cycle"},"timeout":"30s","retries":1}`, "", ""))
	cmd := attemptID(id, "main", 0, false, 1)
	h.agent.waitRunning(t, cmd)
	h.cancel()
	h.engine.Wait()
	h.agent.release(cmd)
	err := h.store.Update(func(tx *store.Tx) error {
		if _, err := tx.EnqueueAgentCommand(h.node, proto.RoleSite, proto.Command{ID: cmd, Kind: "power.setPower", Payload: json.RawMessage(`{"action":"cycle"}`)}, nil); err != nil {
			return err
		}
		_, err := tx.CompleteAgentCommand(h.node, proto.Result{ID: cmd, Result: json.RawMessage(`{"released":true}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	h.store.Close()
	h.store = nil
	h.clock.Advance(31 * time.Second)
	h.open()
	run := h.attemptsDone(id, 0, 1)
	if s := run.Steps[0]; s.State != store.StepSucceeded || s.Attempts[0].Error != nil {
		t.Fatalf("the step resumed after its timeout, its answer stored: %s, attempt error %v", summary(run), s.Attempts[0].Error)
	}
	if run := h.waitEnd(id); run.State != store.RunSucceeded || len(h.agent.executed()) != 1 {
		t.Errorf("run %s; the agent ran %v, want the power action once", summary(run), h.agent.executed())
	}
}

// TestNoCommandIsMadeOnceTheAttemptTimedOut: a step's handler relays a power-off, and
// its attempt's timeout runs out while it works before its next command. That command
// is neither made nor relayed: the relay returns the timeout, and the attempt fails
// TIMEOUT. Before, its input was made (a join token minted, for boot.prepareRamdisk)
// and the command stored and sent to its agent, only to be withdrawn.
func TestNoCommandIsMadeOnceTheAttemptTimedOut(t *testing.T) {
	h := newHarness(t, nil)
	working, made := make(chan context.Context, 1), false
	unblock := make(chan struct{})
	h.engine.Handle("power.setPower", func(ctx context.Context, a *Attempt) (json.RawMessage, error) {
		if _, err := a.Relay(ctx, a.Step.On, "off", "power.setPower", json.RawMessage(`{"action":"off"}`)); err != nil {
			return nil, err
		}
		working <- ctx
		<-unblock
		_, out, err := a.RelayMade(ctx, a.Step.On, "on", "power.setPower", func() (CommandInput, error) {
			made = true
			return CommandInput{Payload: json.RawMessage(`{"action":"on"}`)}, nil
		})
		return out, err
	})
	id := h.start(doc(`{"use":"power.setPower","with":{"action":"cycle"},"timeout":"30s"}`, "", ""))
	ctx := <-working
	h.clock.BlockUntil(1)
	h.clock.Advance(30 * time.Second)
	<-ctx.Done()
	close(unblock)
	run := h.waitEnd(id)
	on := attemptID(id, "main", 0, false, 1) + ":on"
	if made || h.agent.sent()[on] != 0 || run.Steps[0].Error == nil || run.Steps[0].Error.Code != proto.Timeout {
		t.Errorf("run %s; once the attempt timed out, its next command was made %v, relayed %d times; want neither, and TIMEOUT", summary(run), made, h.agent.sent()[on])
	}
}
