package workflow

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/registry/store"
)

// replica starts an engine over the harness's store as another registry on the same
// store does: its own owner name and timers (clk), the store's clock for the claims.
func (h *harness) replica(owner string, clk clock.Clock) (*Engine, context.CancelFunc) {
	e := New(Config{Store: h.store, Clock: clk, Relay: h.agent, Joins: h.joins, Backoff: backoff,
		Claims: &Claims{Owner: owner, TTL: 30 * time.Second}})
	e.OnFinish("test", func(_ *store.Tx, run store.Run) error {
		h.mu.Lock()
		h.finished[run.ID]++
		h.mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	if err := e.Resume(ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { cancel(); e.Wait() })
	return e, cancel
}

// driving is the number of runs e has started and not yet stopped.
func driving(e *Engine) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.running)
}

// claimOf is the run's claim as the store holds it.
func (h *harness) claimOf(id string) store.RunClaim {
	var c store.RunClaim
	h.store.View(func(tx *store.Tx) (err error) { c, _, err = tx.RunClaim(id); return err })
	return c
}

// TestClaimsDriveEachRunOnce: two registries over one store both start a run; the one
// that claims it drives it, the other does not, and takes it over only once the first
// stopped renewing (it froze: its timers never fire again) and its claim expired. The
// step the first was running is resent under the same command id, so the agent runs it
// once; when the frozen registry wakes up with the step's answer, its write is refused:
// it records nothing, sends nothing more, and the run ends once.
func TestClaimsDriveEachRunOnce(t *testing.T) {
	h := newHarness(t, nil)
	h.cancel()
	h.engine.Wait()
	frozen := clock.NewFake(epoch) // replica a's timers: never advanced
	a, _ := h.replica("a", frozen)
	b, _ := h.replica("b", h.clock)
	h.engine = a
	h.agent.script = map[string][]outcome{"power.getPower": {hold}}
	id := h.start(doc(`{"use":"power.getPower"},{"use":"inventory.refresh"}`, "", ""))
	first, second := attemptID(id, "main", 0, false, 1), attemptID(id, "main", 1, false, 1)
	h.agent.waitRunning(t, first)
	b.Start(id)
	waitUntil(t, func() bool { return driving(b) == 0 })
	if c := h.claimOf(id); c.Owner != "a" {
		t.Fatalf("claim %+v, want a's", c)
	}

	// b looks again every 10s: a's claim holds until 30s after a took it.
	h.clock.Advance(10 * time.Second)
	h.clock.BlockUntil(1)
	waitUntil(t, func() bool { return driving(b) == 0 })
	if n := h.agent.sent()[first]; n != 1 || h.claimOf(id).Owner != "a" {
		t.Fatalf("before a's claim expired: %s sent %d times, claim %+v", first, n, h.claimOf(id))
	}
	h.clock.Advance(21 * time.Second)
	waitUntil(t, func() bool { return h.agent.sent()[first] == 2 })
	if c := h.claimOf(id); c.Owner != "b" {
		t.Fatalf("claim %+v, want b's", c)
	}
	h.engine = b
	h.agent.release(first) // both a and b get the answer
	run := h.waitEnd(id)
	if run.State != store.RunSucceeded {
		t.Fatalf("run: %s", summary(run))
	}
	waitUntil(t, func() bool { return driving(a) == 0 })
	sent := h.agent.sent()
	if sent[second] != 1 || len(run.Steps[0].Attempts) != 1 {
		t.Errorf("a drove on after losing the run: %s sent %d times, steps[0] has %d attempts", second, sent[second], len(run.Steps[0].Attempts))
	}
	h.mu.Lock()
	if h.finished[id] != 1 {
		t.Errorf("the run ended %d times", h.finished[id])
	}
	h.mu.Unlock()
	// b gives the claim up once it stopped driving the run.
	waitUntil(t, func() bool {
		var ok bool
		h.store.View(func(tx *store.Tx) (err error) { _, ok, err = tx.RunClaim(id); return err })
		return !ok
	})
}

// waitUntil waits for cond, failing the test after 10 seconds.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("gave up waiting")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCancelThroughAnotherRegistry: a run cancelled through a registry that does not
// drive it (its Abort finds no attempt there) has its running attempt abandoned by the
// registry that drives it at its next renewal of the claims; its cleanup runs, and it
// fails cancelled.
func TestCancelThroughAnotherRegistry(t *testing.T) {
	h := newHarness(t, nil)
	h.cancel()
	h.engine.Wait()
	a, _ := h.replica("a", h.clock)
	b, _ := h.replica("b", clock.NewFake(epoch))
	h.engine = a
	h.agent.script = map[string][]outcome{"power.getPower": {hold}}
	id := h.start(doc(`{"use":"power.getPower"}`, "", `{"use":"media.eject"}`))
	h.agent.waitRunning(t, attemptID(id, "main", 0, false, 1))
	err := h.store.Update(func(tx *store.Tx) error { _, err := b.Cancel(tx, id); return err })
	if err != nil {
		t.Fatal(err)
	}
	b.Abort(id)
	h.clock.Advance(10 * time.Second)
	run := h.waitEnd(id)
	if run.State != store.RunFailed || run.Failure == nil || run.Steps[1].State != store.StepSucceeded {
		t.Fatalf("run: %s", summary(run))
	}
}

// TestAnEarlierRunOfARestartedRegistryDrivesNoMore: a registry restarted while its
// earlier run is still up (the same name: a supervisor that started it again without
// ending it, a host paused past the restart and resumed) takes its runs back at once,
// and the earlier run drives them no more: its writes are refused, it sends nothing
// more, and it does not release the claim the later run holds. Before, both drove the
// run as its one owner: each sent its steps, and the run ended twice.
func TestAnEarlierRunOfARestartedRegistryDrivesNoMore(t *testing.T) {
	h := newHarness(t, nil)
	h.cancel()
	h.engine.Wait()
	earlier, _ := h.replica("a", clock.NewFake(epoch)) // its timers never fire again
	h.engine = earlier
	h.agent.script = map[string][]outcome{"power.getPower": {hold}, "inventory.refresh": {hold}}
	id := h.start(doc(`{"use":"power.getPower"},{"use":"inventory.refresh"}`, "", ""))
	first, second := attemptID(id, "main", 0, false, 1), attemptID(id, "main", 1, false, 1)
	h.agent.waitRunning(t, first)

	h.clock.Advance(time.Second)
	later, _ := h.replica("a", h.clock)
	waitUntil(t, func() bool { return h.agent.sent()[first] == 2 })
	h.engine = later
	h.agent.release(first) // both runs get the answer
	h.agent.waitRunning(t, second)
	waitUntil(t, func() bool { return driving(earlier) == 0 || h.agent.sent()[second] == 2 })
	h.agent.release(second)
	run := h.waitEnd(id)
	if run.State != store.RunSucceeded {
		t.Fatalf("run: %s (%v)", summary(run), run.Failure.Error)
	}
	waitUntil(t, func() bool { return driving(earlier) == 0 && driving(later) == 0 })
	if n := h.agent.sent()[second]; n != 1 {
		t.Errorf("%s sent %d times: the earlier run drove on beside the later one", second, n)
	}
	if n := h.finishedCount(id); n != 1 {
		t.Errorf("the run ended %d times", n)
	}
}

// pausedRelay is the relay of a registry that pauses as the answer of the first command
// it relays reaches it: the answer waits until resume is closed.
type pausedRelay struct {
	*fakeAgent
	answered, resume chan struct{}
}

func (p *pausedRelay) Relay(ctx context.Context, target RelayTarget, id, kind string, in CommandInput) (json.RawMessage, error) {
	out, err := p.fakeAgent.Relay(ctx, target, id, kind, in)
	close(p.answered)
	<-p.resume
	return out, err
}

// TestAPausedRegistryRecordsOnlyItsOwnAttempt: a registry pauses as the failure of a
// step's first try reaches it; another takes the run over, records that failure, starts
// the retry and dies, its claim expiring too. The paused registry resumes, takes the run
// back, and must not record the first try's failure as the retry's end: the retry is
// still running at the agent, and is the step's last chance. Before, it ended the retry
// with the first try's error, and the step failed with its retry never answered.
func TestAPausedRegistryRecordsOnlyItsOwnAttempt(t *testing.T) {
	h := newHarness(t, nil)
	h.cancel()
	h.engine.Wait()
	replica := func(owner string, clk clock.Clock, relay Relay) *Engine {
		e := New(Config{Store: h.store, Clock: clk, Relay: relay, Joins: h.joins, Backoff: backoff,
			Claims: &Claims{Owner: owner, TTL: 30 * time.Second}})
		e.OnFinish("test", func(*store.Tx, store.Run) error { return nil })
		ctx, cancel := context.WithCancel(context.Background())
		if err := e.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); e.Wait() })
		return e
	}
	paused := &pausedRelay{fakeAgent: h.agent, answered: make(chan struct{}), resume: make(chan struct{})}
	a := replica("a", clock.NewFake(epoch), paused) // its timers never fire: it renews no claim
	h.engine = a
	h.agent.script = map[string][]outcome{"power.getPower": {fail, hold}}
	id := h.start(doc(`{"use":"power.getPower","retries":1}`, "", ""))
	first, retry := attemptID(id, "main", 0, false, 1), attemptID(id, "main", 0, false, 2)
	<-paused.answered

	h.clock.Advance(31 * time.Second) // a's claim expired
	bClock := clock.NewFake(h.clock.Now())
	b := replica("b", bClock, h.agent)
	bClock.BlockUntil(1) // b's look for runs to take over
	bClock.Advance(10 * time.Second)
	h.engine = b
	h.attemptsDone(id, 0, 1)
	bClock.BlockUntil(2) // b waits out the retry's backoff, beside its next look
	bClock.Advance(backoff(1))
	h.agent.waitRunning(t, retry)
	h.clock.Advance(31 * time.Second) // b died: its claim expired too

	close(paused.resume)
	waitUntil(t, func() bool { return driving(a) == 0 })
	run := h.load(id)
	s := run.Steps[0]
	if run.State != store.RunRunning || len(s.Attempts) != 2 || !s.AttemptOpen() || h.agent.sent()[first] != 2 {
		t.Errorf("after the paused registry resumed with the first try's answer: %s, attempts %+v", summary(run), s.Attempts)
	}
}
