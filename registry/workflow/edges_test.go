package workflow

import (
	"testing"
	"time"

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
