package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
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
				return nil
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
	fill := func(_ context.Context, a *Attempt) (json.RawMessage, error) {
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

// pad is a JSON string of size bytes, size 2 at least.
func pad(size int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("r", size-2) + `"`)
}
