package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestARunAtItsBoundsEnds: on an etcd cluster of the defaults, a run whose first step
// tries the most a profile allows (1 + 10 retries, then its fallback's 1 + 10), each try
// failing with an agent's error of 2 MiB, and whose next steps answer results of
// proto.MaxStepResult, runs to its end: the step keeps its first and latest tries and
// counts the others, the errors are cut, and the result that would take the run past
// store.MaxRunRecord fails its step with INVALID_INPUT at the result (reason too-large),
// not INTERNAL; the cleanup runs. Before, the errors alone made the run's record 44 MiB,
// which the cluster refused, failing the run INTERNAL at a point nobody chose.
func TestARunAtItsBoundsEnds(t *testing.T) {
	cluster := etcdtest.Shared(t)
	cfg := store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t)}
	h := newHarnessOn(t, nil, func(opts store.Options) (*store.Store, error) { return store.OpenEtcd(cfg, opts) })
	result := json.RawMessage(`{"pad":"` + strings.Repeat("r", proto.MaxStepResult-len(`{"pad":""}`)) + `"}`)
	h.agent.script = map[string][]outcome{
		"power.setPower":    {{fail: true, message: strings.Repeat("é", 1<<20)}},
		"inventory.refresh": {{result: result}},
	}
	const retried = `{"use":"power.setPower","with":{"action":"off"},"retries":10,"onFailure":"continue","fallback":{"use":"power.setPower","with":{"action":"off"},"retries":10}}`
	steps := retried + strings.Repeat(`,{"use":"inventory.refresh","on":"ramdisk"}`, 8)
	id := h.start(doc(steps, "", `{"use":"boot.cleanUp"}`))
	for tries := 1; tries <= 21; tries++ {
		n := tries
		if tries > 11 {
			n = tries - 11
		}
		if run := h.attemptsDone(id, 0, tries); run.Steps[0].State != store.StepRunning {
			t.Fatalf("the first step ended after %d tries: %s %.300s", tries, run.Steps[0].State, run.Steps[0].Error)
		}
		if tries != 11 { // the fallback's first try follows the step's last at once
			h.backOff(id, tries, n)
		}
	}
	run := h.waitEnd(id)
	// 896 KiB take six results of 128 KiB and the rest of the run, not seven.
	want := "failed at steps[7] INVALID_INPUT\nsteps[0] power.setPower failed tries=22 DRIVER_ERROR" +
		strings.Repeat("\nsteps[N] inventory.refresh succeeded tries=1", 6) +
		"\nsteps[7] inventory.refresh failed tries=1 INVALID_INPUT\nsteps[8] inventory.refresh skipped\ncleanup[0] boot.cleanUp succeeded tries=1"
	for i := 1; i <= 6; i++ {
		want = strings.Replace(want, "steps[N]", "steps["+string(rune('0'+i))+"]", 1)
	}
	if got := summary(run); got != want {
		t.Errorf("the run:\n%s\nwant:\n%s", got, want)
	}
	first := run.Steps[0]
	var tries []string
	for _, a := range first.Attempts {
		tries = append(tries, strings.TrimPrefix(a.CommandID, id+":"))
		if len(a.Error.Message) > proto.MaxErrorMessage || !strings.HasSuffix(a.Error.Message, "bytes cut)") {
			t.Errorf("try %s keeps an error of %d bytes", a.CommandID, len(a.Error.Message))
		}
	}
	if got := strings.Join(tries, " "); got != "main.0:a1 main.0:f10 main.0:f11" || first.AttemptsDropped != 19 {
		t.Errorf("the retried step keeps tries %s, %d dropped; want its first and its latest two, 19 dropped", got, first.AttemptsDropped)
	}
	refused := run.Steps[7].Error
	if refused.Details.Path != "steps[7].result" || refused.Details.Reason != proto.ReasonTooLarge {
		t.Errorf("the result past the run's bound fails with %v, want INVALID_INPUT at steps[7].result, reason too-large", refused)
	}
}

// TestAStuckRunAtItsBoundEndsFailed: on an etcd cluster of the defaults, a run whose
// steps' results fill its record to its bound, to the byte, and whose end the cluster
// then refuses (what the end writes for the node, too large), ends failed with the
// failure the registry records for a run it cannot take further ("fails at its end"),
// every result kept. Before, that failure's own write passed the run's bound and was
// refused (INVALID_INPUT, too-large): the run stayed running with nothing driving it.
func TestAStuckRunAtItsBoundEndsFailed(t *testing.T) {
	cluster := etcdtest.Shared(t)
	cfg := store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t)}
	h := newHarnessOn(t, nil, func(opts store.Options) (*store.Store, error) { return store.OpenEtcd(cfg, opts) })
	fill := filler(t, h, false)
	h.handlers = map[string]Handler{"inventory.refresh": fill}
	h.restart()
	h.onFinish = func(tx *store.Tx, run store.Run) error {
		if run.State != store.RunSucceeded {
			return nil
		}
		_, err := tx.CreateProfile(store.ProfileRecord{Tenant: "acme", ID: "huge", Version: 1, Document: refused})
		return err
	}
	// Six results of 128 KiB, and a seventh of what is left of the bound.
	const steps = 7
	id := h.start(doc(strings.TrimPrefix(strings.Repeat(`,{"use":"inventory.refresh","on":"ramdisk"}`, steps), ","), "", ""))
	run := h.waitEnd(id)
	want := "failed at  INTERNAL"
	for i := range steps {
		want += fmt.Sprintf("\nsteps[%d] inventory.refresh succeeded tries=1", i)
	}
	if got := summary(run); got != want {
		t.Errorf("the run:\n%s\nwant:\n%s", got, want)
	}
	if run.Failure == nil || !strings.Contains(run.Failure.Error.Message, "fails at its end") {
		t.Fatalf("the run fails with %+v, want the failure of a run the registry cannot record the end of", run.Failure)
	}
	last := len(run.Steps[steps-1].Result)
	if last >= proto.MaxStepResult || len(run.Steps[steps-2].Result) != proto.MaxStepResult {
		t.Errorf("the last results take %d and %d bytes: want the run filled to its bound by the last", len(run.Steps[steps-2].Result), last)
	}
}

// filler is a handler that answers the largest result its run takes, up to
// proto.MaxStepResult: the run is at its bound, to the byte, once the result is
// recorded; with thenStart, the largest that leaves the run room to start its next
// step, and no more.
func filler(t *testing.T, h *harness, thenStart bool) Handler {
	errAborted := errors.New("aborted")
	// fits says whether step i of the run takes a result of size bytes, recorded as the
	// engine records an attempt that succeeds, in a transaction aborted once the store
	// took it.
	fits := func(id string, i, size int) bool {
		err := h.store.Update(func(tx *store.Tx) error {
			_, err := tx.UpdateRun(id, func(r *store.Run) error {
				s := &r.Steps[i]
				now := h.clock.Now()
				s.Attempts[len(s.Attempts)-1].FinishedAt = now
				s.State, s.Result, s.FinishedAt = store.StepSucceeded, pad(size), now
				if !thenStart {
					return nil
				}
				// The next step's start, as the engine records it.
				next := &r.Steps[i+1]
				boot, err := machineBoot(tx, r.Node)
				next.State, next.StartedAt = store.StepRunning, now
				next.Attempts = append(next.Attempts, store.Attempt{N: 1, CommandID: commandID(id, next.Phase, next.Index, false, 1), BootID: boot, StartedAt: now})
				return err
			})
			if err == nil {
				err = errAborted
			}
			return err
		})
		if !errors.Is(err, errAborted) && !store.RunTooLarge(err) {
			t.Errorf("trying a result of %d bytes: %v", size, err)
		}
		return errors.Is(err, errAborted)
	}
	// fill answers the largest result the run takes, up to proto.MaxStepResult.
	return func(_ context.Context, a *Attempt) (json.RawMessage, error) {
		i := slices.IndexFunc(a.Run.Steps, func(s store.RunStep) bool { return !s.Terminal() })
		lo, hi := 2, proto.MaxStepResult+1 // lo taken, hi refused
		if !fits(a.Run.ID, i, lo) {
			return nil, fmt.Errorf("%s takes no result", a.Run.Steps[i].Path())
		}
		for hi-lo > 1 {
			if mid := (lo + hi) / 2; fits(a.Run.ID, i, mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		return pad(lo), nil
	}
}

// pad is a JSON string of size bytes, size 2 at least.
func pad(size int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("r", size-2) + `"`)
}

// haltedAtItsBound is a harness on a default etcd cluster whose runs keep 127 KiB
// (EndBytes), so that one result fills a run, of the most steps a profile has (384) or
// of a few, to its bound: inventory.refresh answers the largest result its run takes (filler),
// power.setPower runs until its run is cancelled, telling started of it.
func haltedAtItsBound(t *testing.T) (h *harness, started chan string) {
	cluster := etcdtest.Shared(t)
	cfg := store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t)}
	h = newHarnessOn(t, nil, func(opts store.Options) (*store.Store, error) { return store.OpenEtcd(cfg, opts) })
	started = make(chan string, 4)
	h.handlers = map[string]Handler{
		"inventory.refresh": filler(t, h, true),
		"power.getPower":    filler(t, h, false),
		"power.setPower": func(ctx context.Context, a *Attempt) (json.RawMessage, error) {
			started <- store.RunStep{Phase: a.Step.Phase, Index: a.Step.Index}.Path()
			<-ctx.Done()
			return nil, context.Cause(ctx)
		},
	}
	h.restart()
	// The largest request less the room of the end's transaction, less what a run keeps.
	h.endBytes = 1<<20 + 320<<10
	return h, started
}

// waitStarted waits until the step at path has started, failing the test after 10
// seconds.
func waitStarted(t *testing.T, started chan string, path string) {
	t.Helper()
	select {
	case got := <-started:
		if got != path {
			t.Fatalf("%s started, want %s", got, path)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s has not started after 10 seconds", path)
	}
}

// cancelAt cancels run id once its step at path has started.
func cancelAt(t *testing.T, h *harness, started chan string, id, path string) {
	t.Helper()
	waitStarted(t, started, path)
	storetest.Update(t, h.store, func(tx *store.Tx) error { _, err := h.engine.Cancel(tx, id); return err })
	h.engine.Abort(id)
}

const (
	setPower = `{"use":"power.setPower","with":{"action":"off"}}`
	refresh  = `{"use":"inventory.refresh","on":"ramdisk"}`
)

// steps is n copies of step, a JSON list's items.
func steps(step string, n int) string {
	return strings.TrimPrefix(strings.Repeat(","+step, n), ",")
}

// TestACancelledRunOfTheMostStepsAtItsBoundEnds: on a default etcd cluster, a run of
// 384 steps (256 main, 64 acceptance, 64 cleanup whose when does not hold) filled to
// its bound, to the byte, by its first step's result, and cancelled at its second,
// ends failed, cancelled, every step after the second shown skipped with its reason.
// Before, each of the 382 steps skipped kept a reason of its own (50 bytes), which the
// room its halt kept (4 KiB) did not hold: their skips were refused (INVALID_INPUT,
// too-large), its failure at once too, and the run stayed running with nothing driving
// it.
func TestACancelledRunOfTheMostStepsAtItsBoundEnds(t *testing.T) {
	h, started := haltedAtItsBound(t)
	unheld := `{"use":"power.getPower","when":"nvswitch"}`
	id := h.start(doc(refresh+","+setPower+","+steps(refresh, 254), steps(refresh, 64), steps(unheld, 64)))
	waitStarted(t, started, "steps[1]")
	var cancelled store.Run
	storetest.Update(t, h.store, func(tx *store.Tx) (err error) { cancelled, err = h.engine.Cancel(tx, id); return err })
	h.engine.Abort(id)
	run := h.waitEnd(id)
	// The 382 steps not run are skipped in the write that abandons steps[1]; each
	// cleanup step is then met on its own (its when), and the end is one write more.
	// Before, each skip was a write of its own: 384 writes after the cancel.
	if writes, most := run.Rev-cancelled.Rev, 1+64+1; writes > most {
		t.Errorf("the run was written %d times after its cancel, want at most %d", writes, most)
	}
	if run.Failure == nil || run.Failure.Error.Details.Reason != proto.ReasonCancelled || run.Failure.Step != "steps[1]" {
		t.Fatalf("the run ends %s with %+v, want it failed, cancelled at steps[1]", run.State, run.Failure)
	}
	if len(run.Steps) != 384 || run.Steps[0].State != store.StepSucceeded || run.Steps[1].State != store.StepFailed {
		t.Fatalf("the run: %s", summary(run))
	}
	for _, s := range run.Steps[2:] {
		want := "not run: the workflow was cancelled"
		if s.Phase == phaseCleanup {
			want = "when nvswitch does not hold for the node's labels"
		}
		if s.State != store.StepSkipped || s.Reason != want {
			t.Fatalf("%s is %s (%q), want skipped: %s", s.Path(), s.State, s.Reason, want)
		}
	}
	// The API's view reads the run as the store gives it: every reason.
	err := h.store.View(func(tx *store.Tx) error {
		stored, err := tx.Run(id)
		if err == nil && stored.Steps[383].Reason != run.Steps[383].Reason {
			t.Errorf("the stored run reads cleanup[63]'s reason %q", stored.Steps[383].Reason)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestACancelledRunWhoseCleanupFillsItsBoundEnds: on a default etcd cluster, a run
// filled to its bound by its first step and cancelled at its second, whose cleanup's
// first step answers the largest result the run takes, ends failed, cancelled: its
// cleanup's second step, which the run can no longer record the start of, is skipped
// with the reason of a run the registry could not go on with. Before, the cleanup's
// result took the room the halt had freed, and the failure at once that follows
// (failStuck on a cancelled run) was refused for size: the run stayed running.
func TestACancelledRunWhoseCleanupFillsItsBoundEnds(t *testing.T) {
	h, started := haltedAtItsBound(t)
	id := h.start(doc(refresh+","+setPower, "", steps(`{"use":"power.getPower"}`, 2)))
	cancelAt(t, h, started, id, "steps[1]")
	run := h.waitEnd(id)
	want := "failed at steps[1] INVALID_STATE\nsteps[0] inventory.refresh succeeded tries=1\nsteps[1] power.setPower failed tries=1 INVALID_STATE" +
		"\ncleanup[0] power.getPower succeeded tries=1\ncleanup[1] power.getPower skipped"
	if got := summary(run); got != want {
		t.Fatalf("the run:\n%s\nwant:\n%s", got, want)
	}
	if got := run.Steps[3].Reason; got != "not run: the registry could not go on with the workflow" {
		t.Errorf("cleanup[1] skipped for %q", got)
	}
	if len(run.Steps[2].Result) < 1<<10 {
		t.Errorf("the cleanup's result took %d bytes: want it to fill the room the halt left", len(run.Steps[2].Result))
	}
}

// TestFailStuckOnACancelledRunAtItsBoundEnds: on a default etcd cluster, a run filled to
// its bound by its first step, cancelled at its second, and filled to its bound again
// by its cleanup's first step, which the registry then fails at once, its cleanup's
// second step running, for a cause of 1 MiB of control characters (failStuck, as when
// its cleanup's record is refused), ends failed, cancelled: the step fails with the
// cause, brief. Before, that failure replaced the run's cancellation and
// failed the step with the cause at length: more than the room left, refused for size,
// and the run stayed running.
func TestFailStuckOnACancelledRunAtItsBoundEnds(t *testing.T) {
	h, started := haltedAtItsBound(t)
	id := h.start(doc(refresh+","+setPower, "", refresh+","+setPower))
	cancelAt(t, h, started, id, "steps[1]")
	waitStarted(t, started, "cleanup[1]")
	cause := proto.Errorf(proto.InvalidInput, "%s", strings.Repeat("\x01", 1<<20)).WithReason(strings.Repeat("\x01", 1<<10))
	if err := h.engine.failStuck(id, cause); err != nil {
		t.Fatalf("failing the cancelled run at once: %v", err)
	}
	run := h.waitEnd(id)
	want := "failed at steps[1] INVALID_STATE\nsteps[0] inventory.refresh succeeded tries=1\nsteps[1] power.setPower failed tries=1 INVALID_STATE" +
		"\ncleanup[0] inventory.refresh succeeded tries=1\ncleanup[1] power.setPower failed tries=1 INTERNAL"
	if got := summary(run); got != want {
		t.Fatalf("the run:\n%s\nwant:\n%s", got, want)
	}
	if msg := run.Steps[3].Error.Message; !strings.HasPrefix(msg, "workflow "+id+" fails at once") || len(msg) > 96 {
		t.Errorf("cleanup[1] fails with %q, want the failure at once, brief", msg)
	}
}
