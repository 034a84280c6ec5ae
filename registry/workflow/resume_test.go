package workflow

import (
	"fmt"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/store"
	"github.com/google/go-cmp/cmp"
)

// resumeDoc has a step that fails once and is retried after a backoff, a step that
// awaits the machine's rejoin, an acceptance step and two cleanup steps.
var resumeDoc = doc(
	`{"use":"power.getPower"},{"use":"inspect.oob","retries":1},{"use":"power.setPower","with":{"action":"cycle"},"await":"rejoin"},{"use":"inventory.refresh"}`,
	`{"use":"diag.dcgm"}`,
	`{"use":"boot.cleanUp"},{"use":"media.eject"}`)

// resumeCommands are the commands a run of resumeDoc sends, in order.
var resumeCommands = []string{"main.0:a1", "main.1:a1", "main.1:a2", "main.2:a1", "main.3:a1", "acceptance.0:a1", "cleanup.0:a1", "cleanup.1:a1"}

const resumeSummary = "succeeded\nsteps[0] power.getPower succeeded tries=1\nsteps[1] inspect.oob succeeded tries=2" +
	"\nsteps[2] power.setPower succeeded tries=1\nsteps[3] inventory.refresh succeeded tries=1" +
	"\nacceptance[0] diag.dcgm succeeded tries=1\ncleanup[0] boot.cleanUp succeeded tries=1\ncleanup[1] media.eject succeeded tries=1"

// TestResumeAfterTheRegistryStops stops the registry (engine dropped, store closed) at
// every step boundary, in the middle of every step, during a retry's backoff and while a
// step awaits the rejoin, then reopens the store and resumes: no completed step runs
// again, an interrupted one is resent under the same command id, and cleanup runs once.
func TestResumeAfterTheRegistryStops(t *testing.T) {
	type stopAt struct {
		// command stops the registry when it is sent: "before" it reaches the agent (the
		// step boundary: the step before it is done, its attempt recorded), or once
		// the agent is "running" it.
		command, when string
		// phase stops the registry during the "backoff" of steps[1] or while steps[2]
		// is "awaiting" the rejoin.
		phase string
	}
	cases := map[string]stopAt{
		"during the retry's backoff":                   {phase: "backoff"},
		"while awaiting the rejoin":                    {phase: "awaiting"},
		"the first step's attempt":                     {command: "main.0:a1", when: "before"},
		"with nothing completed":                       {command: "main.0:a1", when: "running"},
		"before a retry":                               {command: "main.1:a2", when: "before"},
		"in the middle of a retry":                     {command: "main.1:a2", when: "running"},
		"before an await-rejoin step":                  {command: "main.2:a1", when: "before"},
		"once it relayed, not yet awaiting the rejoin": {command: "main.2:a1", when: "running"},
	}
	for _, c := range resumeCommands[4:] {
		cases["before "+c] = stopAt{command: c, when: "before"}
		cases["in the middle of "+c] = stopAt{command: c, when: "running"}
	}
	for name, at := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.agent.script = map[string][]outcome{"inspect.oob": {fail, ok}}
			h.clock.Advance(time.Second)
			id := h.start(resumeDoc)
			if at.command != "" {
				h.agent.mu.Lock()
				h.agent.crashOn[id+":"+at.command] = at.when
				h.agent.mu.Unlock()
			}
			restarts := 0
			advanced, joined := false, false
			backoffDue := func(r store.Run) bool { a := r.Steps[1].Attempts; return len(a) == 1 && !a[0].FinishedAt.IsZero() }
			awaiting := func(r store.Run) bool { a := r.Steps[2].Attempts; return len(a) == 1 && a[0].Awaiting }
			for {
				run, crashed := h.next(id, func(r store.Run) bool {
					return r.State != store.RunRunning || !advanced && backoffDue(r) || !joined && awaiting(r)
				})
				switch {
				case crashed:
					h.restart()
					restarts++
				case run.State != store.RunRunning:
					if diff := cmp.Diff(resumeSummary, summary(run)); diff != "" {
						t.Errorf("run (-want +got):\n%s", diff)
					}
					h.checkAgent(id, at.command, restarts)
					return
				case !advanced && backoffDue(run):
					h.clock.BlockUntil(1)
					if at.phase == "backoff" {
						h.restart()
						restarts++
						h.clock.BlockUntil(1)
					}
					h.clock.Advance(backoff(1))
					advanced = true
				case !joined && awaiting(run):
					if at.phase == "awaiting" {
						h.restart()
						restarts++
					}
					if err := h.joins.Joined(h.node, "ramdisk", ""); err != nil {
						t.Fatal(err)
					}
					joined = true
				}
			}
		})
	}
}

// checkAgent checks that the agent ran every command once, that only the interrupted one
// was sent twice, that the registry restarted once and that the run ended once; and
// that the run recorded every attempt's answers (Relay.Recorded), so that the store
// keeps only their digests, but never before the attempt was done with them: an
// interrupted one ("running": answered, the registry stopped before the attempt
// recorded it) is resent after the restart and gets its answer, where the fake relay
// refuses a recorded command INVALID_STATE, which would fail the step.
func (h *harness) checkAgent(id, interrupted string, restarts int) {
	h.t.Helper()
	var want []string
	sends := map[string]int{}
	recorded := map[string]bool{}
	for _, c := range resumeCommands {
		want = append(want, id+":"+c)
		sends[id+":"+c] = 1
		recorded[id+":"+c] = true
	}
	got := map[string]bool{}
	for _, attempt := range h.agent.recordedAttempts() {
		got[attempt] = true
	}
	if diff := cmp.Diff(recorded, got); diff != "" {
		h.t.Errorf("attempts whose answers the run recorded (-want +got):\n%s", diff)
	}
	h.agent.mu.Lock()
	spent := len(h.agent.spent)
	h.agent.mu.Unlock()
	if spent != len(resumeCommands) {
		h.t.Errorf("%d commands spent once the run ended, want all %d", spent, len(resumeCommands))
	}
	if interrupted != "" {
		sends[id+":"+interrupted] = 2
	}
	if diff := cmp.Diff(want, h.agent.executed()); diff != "" {
		h.t.Errorf("commands the agent ran (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sends, h.agent.sent()); diff != "" {
		h.t.Errorf("sends per command id (-want +got):\n%s", diff)
	}
	if restarts != 1 || h.finished[id] != 1 {
		h.t.Errorf("%d restarts, the run ended %d times; want 1 and 1", restarts, h.finished[id])
	}
}

// next polls the run until cond holds for it or the agent stopped the registry.
func (h *harness) next(id string, cond func(store.Run) bool) (store.Run, bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if h.agent.takeCrash() {
			return store.Run{}, true
		}
		run := h.load(id)
		if cond(run) {
			return run, false
		}
		time.Sleep(time.Millisecond)
	}
	h.t.Fatalf("workflow %s: stuck at %s", id, summary(h.load(id)))
	return store.Run{}, false
}

func TestCommandIDs(t *testing.T) {
	cases := map[string]struct {
		phase    string
		index    int
		fallback bool
		n        int
		sub      string
		want     string
	}{
		"a step's first try":       {"main", 5, false, 1, "", "wf_0123456789abcdef:main.5:a1"},
		"a fallback's second try":  {"cleanup", 0, true, 2, "", "wf_0123456789abcdef:cleanup.0:f2"},
		"one of an attempt's many": {"acceptance", 1, false, 3, "pxe", "wf_0123456789abcdef:acceptance.1:a3:pxe"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			id := subCommandID(commandID("wf_0123456789abcdef", tc.phase, tc.index, tc.fallback, tc.n), tc.sub)
			if id != tc.want {
				t.Errorf("id %s, want %s", id, tc.want)
			}
			run, phase, index, err := stepOf(id)
			if got := fmt.Sprint(run, phase, index, err); got != fmt.Sprint("wf_0123456789abcdef", tc.phase, tc.index, nil) {
				t.Errorf("parsed %s", got)
			}
		})
	}
	for _, bad := range []string{"", "wf_1", "wf_1:main:a1", "wf_1:main.x:a1"} {
		if _, _, _, err := stepOf(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
