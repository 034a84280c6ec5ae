package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/google/go-cmp/cmp"
)

// doc writes a profile with the given main, acceptance and cleanup steps.
func doc(steps, acceptance, cleanup string) string {
	d := `{"id":"t","version":1,"target":"metal","steps":[` + steps + `]`
	if acceptance != "" {
		d += `,"acceptance":[` + acceptance + `]`
	}
	if cleanup != "" {
		d += `,"cleanup":[` + cleanup + `]`
	}
	return d + "}"
}

// attemptID is the command id of a try of step index of phase in run id.
func attemptID(id, phase string, index int, fallback bool, n int) string {
	return commandID(id, phase, index, fallback, n)
}

func TestStepFields(t *testing.T) {
	nvidia := map[string]string{"gpu.vendor": "nvidia"}
	cases := map[string]struct {
		doc    string
		script map[string][]outcome
		// drive moves the clock and joins agents while the run goes on.
		drive func(h *harness, id string)
		want  string
		// ran is the commands the agent ran, as "phase.index:try kind".
		ran []string
	}{
		"timeout: the catalog's default bounds an attempt": {
			doc:    doc(`{"use":"power.getPower"}`, "", ""),
			script: map[string][]outcome{"power.getPower": {hold}},
			drive: func(h *harness, id string) {
				h.agent.waitRunning(h.t, attemptID(id, "main", 0, false, 1))
				h.clock.BlockUntil(1)
				h.clock.Advance(2*time.Minute - time.Second)
				if r := h.load(id); r.Steps[0].State != store.StepRunning {
					h.t.Errorf("failed before its 2m: %s", summary(r))
				}
				h.clock.Advance(time.Second)
			},
			want: "failed at steps[0] TIMEOUT\nsteps[0] power.getPower failed tries=1 TIMEOUT",
			ran:  []string{"main.0:a1 power.getPower"},
		},
		"timeout: the step's own": {
			doc:    doc(`{"use":"power.getPower","timeout":"30s"}`, "", ""),
			script: map[string][]outcome{"power.getPower": {hold}},
			drive: func(h *harness, id string) {
				h.agent.waitRunning(h.t, attemptID(id, "main", 0, false, 1))
				h.clock.BlockUntil(1)
				h.clock.Advance(30 * time.Second)
			},
			want: "failed at steps[0] TIMEOUT\nsteps[0] power.getPower failed tries=1 TIMEOUT",
			ran:  []string{"main.0:a1 power.getPower"},
		},
		"retries: each after its backoff, until one succeeds": {
			doc:    doc(`{"use":"power.getPower","retries":2}`, "", ""),
			script: map[string][]outcome{"power.getPower": {fail, fail, ok}},
			drive: func(h *harness, id string) {
				h.backOff(id, 1, 1)
				h.backOff(id, 2, 2)
			},
			want: "succeeded\nsteps[0] power.getPower succeeded tries=3",
			ran:  []string{"main.0:a1 power.getPower", "main.0:a2 power.getPower", "main.0:a3 power.getPower"},
		},
		"retries: exhausted, the step fails with the last error": {
			doc:    doc(`{"use":"power.getPower","retries":1}`, "", ""),
			script: map[string][]outcome{"power.getPower": {fail}},
			drive: func(h *harness, id string) {
				h.backOff(id, 1, 1)
			},
			want: "failed at steps[0] DRIVER_ERROR\nsteps[0] power.getPower failed tries=2 DRIVER_ERROR",
			ran:  []string{"main.0:a1 power.getPower", "main.0:a2 power.getPower"},
		},
		"onFailure fail: the rest of main and acceptance do not run, cleanup does": {
			doc:    doc(`{"use":"power.getPower"},{"use":"inspect.oob"}`, `{"use":"media.eject"}`, `{"use":"boot.cleanUp"}`),
			script: map[string][]outcome{"power.getPower": {fail}},
			want: "failed at steps[0] DRIVER_ERROR\nsteps[0] power.getPower failed tries=1 DRIVER_ERROR\nsteps[1] inspect.oob skipped" +
				"\nacceptance[0] media.eject skipped\ncleanup[0] boot.cleanUp succeeded tries=1",
			ran: []string{"main.0:a1 power.getPower", "cleanup.0:a1 boot.cleanUp"},
		},
		"onFailure continue: the failure is recorded and the next step runs": {
			doc:    doc(`{"use":"power.getPower","onFailure":"continue"},{"use":"inspect.oob"}`, "", ""),
			script: map[string][]outcome{"power.getPower": {fail}},
			want:   "succeeded\nsteps[0] power.getPower failed tries=1 DRIVER_ERROR\nsteps[1] inspect.oob succeeded tries=1",
			ran:    []string{"main.0:a1 power.getPower", "main.1:a1 inspect.oob"},
		},
		"fallback: its success is the step's": {
			doc:    doc(`{"use":"power.setPower","with":{"action":"graceful-off"},"fallback":{"use":"power.setPower","with":{"action":"off"}}}`, "", ""),
			script: map[string][]outcome{"power.setPower": {fail, ok}},
			want:   "succeeded\nsteps[0] power.setPower succeeded tries=2 via-fallback",
			ran:    []string{"main.0:a1 power.setPower", "main.0:f1 power.setPower"},
		},
		"fallback: after the step's retries, then with retries of its own": {
			doc:    doc(`{"use":"power.setPower","with":{"action":"graceful-off"},"retries":1,"fallback":{"use":"power.setPower","with":{"action":"off"},"retries":1}}`, "", ""),
			script: map[string][]outcome{"power.setPower": {fail, fail, fail, ok}},
			drive: func(h *harness, id string) {
				h.backOff(id, 1, 1)
				h.backOff(id, 3, 1)
			},
			want: "succeeded\nsteps[0] power.setPower succeeded tries=4 via-fallback",
			ran:  []string{"main.0:a1 power.setPower", "main.0:a2 power.setPower", "main.0:f1 power.setPower", "main.0:f2 power.setPower"},
		},
		"fallback fails: onFailure fail fails the run": {
			doc:    doc(`{"use":"power.setPower","with":{"action":"graceful-off"},"fallback":{"use":"power.setPower","with":{"action":"off"}}},{"use":"inspect.oob"}`, "", ""),
			script: map[string][]outcome{"power.setPower": {fail}},
			want:   "failed at steps[0] DRIVER_ERROR\nsteps[0] power.setPower failed tries=2 DRIVER_ERROR\nsteps[1] inspect.oob skipped",
			ran:    []string{"main.0:a1 power.setPower", "main.0:f1 power.setPower"},
		},
		"fallback fails: onFailure continue goes on": {
			doc:    doc(`{"use":"power.setPower","with":{"action":"graceful-off"},"onFailure":"continue","fallback":{"use":"power.setPower","with":{"action":"off"}}},{"use":"inspect.oob"}`, "", ""),
			script: map[string][]outcome{"power.setPower": {fail}},
			want:   "succeeded\nsteps[0] power.setPower failed tries=2 DRIVER_ERROR\nsteps[1] inspect.oob succeeded tries=1",
			ran:    []string{"main.0:a1 power.setPower", "main.0:f1 power.setPower", "main.1:a1 inspect.oob"},
		},
		"fallback whose when does not hold: the step fails without it": {
			doc:    doc(`{"use":"power.setPower","with":{"action":"graceful-off"},"fallback":{"use":"power.setPower","with":{"action":"off"},"when":"nvswitch"}}`, "", ""),
			script: map[string][]outcome{"power.setPower": {fail}},
			want:   "failed at steps[0] DRIVER_ERROR\nsteps[0] power.setPower failed tries=1 DRIVER_ERROR",
			ran:    []string{"main.0:a1 power.setPower"},
		},
		"when: a step whose expression does not hold is skipped and nothing is sent": {
			doc:  doc(`{"use":"power.getPower","when":"gpu.vendor=amd"},{"use":"inspect.oob","when":"gpu.vendor=nvidia"}`, "", ""),
			want: "succeeded\nsteps[0] power.getPower skipped\nsteps[1] inspect.oob succeeded tries=1",
			ran:  []string{"main.1:a1 inspect.oob"},
		},
		"await rejoin: done once the machine's agent joins after the step started": {
			doc: doc(`{"use":"power.setPower","with":{"action":"cycle"},"await":"rejoin"}`, "", ""),
			drive: func(h *harness, id string) {
				h.waitFor(id, func(r store.Run) bool { a := r.Steps[0].Attempts; return len(a) == 1 && a[0].Awaiting })
				h.clock.Advance(time.Second)
				if err := h.joins.Joined(h.node, "ramdisk", ""); err != nil {
					h.t.Fatal(err)
				}
			},
			want: "succeeded\nsteps[0] power.setPower succeeded tries=1",
			ran:  []string{"main.0:a1 power.setPower"},
		},
		"await rejoin: no join within the timeout is TIMEOUT": {
			doc: doc(`{"use":"boot.kexec","await":"rejoin","timeout":"15m"}`, "", ""),
			drive: func(h *harness, id string) {
				h.waitFor(id, func(r store.Run) bool { a := r.Steps[0].Attempts; return len(a) == 1 && a[0].Awaiting })
				h.clock.BlockUntil(1)
				h.clock.Advance(15 * time.Minute)
			},
			want: "failed at steps[0] TIMEOUT\nsteps[0] boot.kexec failed tries=1 TIMEOUT",
			ran:  []string{"main.0:a1 boot.kexec"},
		},
		"cleanup: every step runs, and a failing one fails the run": {
			doc:    doc(`{"use":"power.getPower"}`, "", `{"use":"boot.cleanUp"},{"use":"media.eject"}`),
			script: map[string][]outcome{"boot.cleanUp": {fail}},
			want: "failed at cleanup[0] DRIVER_ERROR\nsteps[0] power.getPower succeeded tries=1\ncleanup[0] boot.cleanUp failed tries=1 DRIVER_ERROR" +
				"\ncleanup[1] media.eject succeeded tries=1",
			ran: []string{"main.0:a1 power.getPower", "cleanup.0:a1 boot.cleanUp", "cleanup.1:a1 media.eject"},
		},
		"a control-plane step without a handler is UNSUPPORTED": {
			doc:  doc(`{"use":"wait.generationObserved"}`, "", ""),
			want: "failed at steps[0] UNSUPPORTED\nsteps[0] wait.generationObserved failed tries=1 UNSUPPORTED",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nvidia)
			// A join before the run starts never satisfies a rejoin.
			if err := h.joins.Joined(h.node, "node", ""); err != nil {
				t.Fatal(err)
			}
			h.clock.Advance(time.Second)
			h.agent.script = tc.script
			id := h.start(tc.doc)
			if tc.drive != nil {
				tc.drive(h, id)
			}
			run := h.waitEnd(id)
			if diff := cmp.Diff(tc.want, summary(run)); diff != "" {
				t.Errorf("run (-want +got):\n%s", diff)
			}
			var ran []string
			for _, c := range h.agent.executed() {
				ran = append(ran, strings.TrimPrefix(c, id+":")+" "+h.agent.kinds[c])
			}
			if diff := cmp.Diff(tc.ran, ran); diff != "" {
				t.Errorf("commands the agent ran (-want +got):\n%s", diff)
			}
			if h.finished[id] != 1 {
				t.Errorf("the finish hook ran %d times", h.finished[id])
			}
		})
	}
}

func (h *harness) load(id string) store.Run {
	h.t.Helper()
	run, err := h.engine.load(id)
	if err != nil {
		h.t.Fatal(err)
	}
	return run
}

func TestRetryWaitsItsBackoffFromTheFailedTry(t *testing.T) {
	h := newHarness(t, nil)
	h.agent.script = map[string][]outcome{"power.getPower": {fail, fail, ok}}
	id := h.start(doc(`{"use":"power.getPower","retries":2}`, "", ""))
	h.backOff(id, 1, 1)
	h.backOff(id, 2, 2)
	run := h.waitEnd(id)
	var gaps []time.Duration
	a := run.Steps[0].Attempts
	for i := 1; i < len(a); i++ {
		gaps = append(gaps, a[i].StartedAt.Sub(a[i-1].FinishedAt))
	}
	if diff := cmp.Diff([]time.Duration{time.Minute, 2 * time.Minute}, gaps); diff != "" {
		t.Errorf("gaps between tries (-want +got):\n%s", diff)
	}
}

func TestRelayedStepsGoWhereTheyRun(t *testing.T) {
	h := newHarness(t, nil)
	id := h.start(doc(`{"use":"power.setPower","with":{"action":"on"},"timeout":"90s"},{"use":"inventory.refresh","on":"node"}`, "", ""))
	h.waitEnd(id)
	got := map[string]string{}
	for _, c := range h.agent.executed() {
		tg := h.agent.targets[c]
		got[h.agent.kinds[c]] = fmt.Sprintf("%s/%s/%s %ds %s", tg.Role, tg.SiteID, tg.NodeID, tg.TimeoutSeconds, h.agent.inputs[c])
	}
	// Each command carries its step's timeout (inventory.refresh's default 10m), which
	// a site agent runs it for at most.
	want := map[string]string{
		"power.setPower":    fmt.Sprintf(`site/rack-a/%s 90s {"action":"on"}`, h.node),
		"inventory.refresh": fmt.Sprintf("node//%s 600s ", h.node),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("targets and inputs (-want +got):\n%s", diff)
	}
}

func TestControlPlaneHandlerGetsTheAttempt(t *testing.T) {
	h := newHarness(t, nil)
	var seen []string
	h.engine.Handle("wait.generationObserved", func(_ context.Context, a *Attempt) (json.RawMessage, error) {
		p, err := a.Profile()
		if err != nil {
			return nil, err
		}
		seen = append(seen, a.CommandID, a.Node.ID, p.ID())
		if len(seen) == 3 {
			return nil, proto.Errorf(proto.DriverError, "first try fails")
		}
		return json.RawMessage(`{"observed":true}`), nil
	})
	id := h.start(doc(`{"use":"wait.generationObserved","retries":1}`, "", ""))
	h.backOff(id, 1, 1)
	run := h.waitEnd(id)
	want := []string{id + ":main.0:a1", h.node, "t", id + ":main.0:a2", h.node, "t"}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("attempts seen (-want +got):\n%s", diff)
	}
	if string(run.Steps[0].Result) != `{"observed":true}` || run.State != store.RunSucceeded {
		t.Errorf("run %s, result %s", summary(run), run.Steps[0].Result)
	}
}

func TestTheFirstRunMarksTheProfileUsed(t *testing.T) {
	h := newHarness(t, nil)
	id := h.start(doc(`{"use":"power.getPower"}`, "", ""))
	h.waitEnd(id)
	err := h.store.Update(func(tx *store.Tx) error {
		_, err := tx.ReplaceProfileDocument("acme", "t", 1, 0, []byte(doc(`{"use":"inspect.oob"}`, "", "")))
		return err
	})
	if proto.CodeOf(err) != proto.InvalidState {
		t.Fatalf("replacing a used version: %v, want INVALID_STATE", err)
	}
}

func TestARunKeepsItsStepsWhenItsProfileIsDeleted(t *testing.T) {
	h := newHarness(t, nil)
	h.agent.script = map[string][]outcome{"power.getPower": {hold}}
	id := h.start(doc(`{"use":"power.getPower"},{"use":"inspect.oob"}`, "", ""))
	h.agent.waitRunning(t, attemptID(id, "main", 0, false, 1))
	if err := h.store.Update(func(tx *store.Tx) error { _, err := tx.DeleteProfile("acme", "t", 0); return err }); err != nil {
		t.Fatal(err)
	}
	h.agent.release(attemptID(id, "main", 0, false, 1))
	if run := h.waitEnd(id); run.State != store.RunSucceeded || len(h.agent.executed()) != 2 {
		t.Errorf("run %s; the agent ran %v", summary(run), h.agent.executed())
	}
}

func TestProgressIsRecordedOnTheRunningStep(t *testing.T) {
	h := newHarness(t, nil)
	h.agent.script = map[string][]outcome{"inventory.refresh": {hold}}
	id := h.start(doc(`{"use":"inventory.refresh"}`, "", ""))
	cmd := attemptID(id, "main", 0, false, 1)
	h.agent.waitRunning(t, cmd)
	if err := h.engine.ReportProgress(cmd+":image", nil, json.RawMessage(`{"bytesWritten":1024}`)); err != nil {
		t.Fatal(err)
	}
	run := h.waitFor(id, func(r store.Run) bool { return r.Steps[0].Progress != nil })
	if string(run.Steps[0].Progress) != `{"bytesWritten":1024}` {
		t.Errorf("progress %s", run.Steps[0].Progress)
	}
	if err := h.engine.ReportProgress("wf_unknown:main.0:a1", nil, nil); proto.CodeOf(err) != proto.NotFound {
		t.Errorf("progress of an unknown run: %v", err)
	}
	h.agent.release(cmd)
	h.waitEnd(id)
	if err := h.engine.ReportProgress(cmd, nil, nil); err == nil {
		t.Error("progress of an ended run was accepted")
	}
}
