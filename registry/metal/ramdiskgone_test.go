package metal

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
	"github.com/google/go-cmp/cmp"
)

// TestEnsureRamdiskGoneOrBack: a retire finds the ramdisk that joined since the machine
// was last powered off with its session ended. One that does not come back within
// workflow.ReconnectGrace of its end is gone: the machine is booted into the ramdisk
// again (pxe, cycle) before the wipe goes to it, and the step's result says why. One
// that comes back within the grace takes the wipe, nothing booted; so does one whose
// session is open. One followed by the machine's installed OS within the grace (the
// machine booted its disk) is booted again at once, without waiting out the grace; one
// the OS followed long ago (a deploy's kexec) is booted with nothing said of it. One
// whose registry stopped and asked it back later than the grace (a big fleet's stream)
// is waited for until that moment, three quarters of its stream past it (a return
// refused re-slots itself within a quarter, up to three times) and the grace: it takes
// the wipe when it comes back then, and is booted again, saying so, when it does not,
// never waited for longer than the longest stream, three quarters of it and the grace. The session of a registry run that stopped without recording its
// end (a restart) counts as ended at its join, not as gone at once. A ramdisk that
// joined before the retire moved the machine's identity epoch is gone at once, open
// session or not: its certificate is refused.
func TestEnsureRamdiskGoneOrBack(t *testing.T) {
	boot := []string{"site management.setBootDevice", "site boot.prepareRamdisk", "site power.setPower", "ramdisk disk.wipe"}
	cases := map[string]struct {
		// prepare runs once the ramdisk joined, its session open.
		prepare func(h *harness, node string)
		// waits: metal.ensureRamdisk waits for the ramdisk to come back; during is
		// what happens meanwhile, the registry's clock then moves on by advance.
		waits   bool
		during  func(h *harness, node string)
		advance time.Duration
		want    []string
		gone    string
	}{
		"a live ramdisk takes the wipe": {
			want: []string{"ramdisk disk.wipe"},
		},
		"a ramdisk whose session ended and that does not come back is booted again": {
			prepare: func(h *harness, node string) { h.left(node) },
			waits:   true, advance: workflow.ReconnectGrace,
			want: boot, gone: "the ramdisk's session ended at 2026-03-01T12:00:01Z and it did not come back within 1m0s",
		},
		// The retire, a grace later, moved the identity epoch after the ramdisk joined.
		"a ramdisk whose session ended a grace ago is booted again at once": {
			prepare: func(h *harness, node string) { h.left(node); h.clock.Advance(workflow.ReconnectGrace) },
			want:    boot, gone: "the ramdisk that joined at 2026-03-01T12:00:01Z holds a certificate of an earlier installation: the machine's identity epoch moved to 1 at 2026-03-01T12:01:01Z " +
				"(a deploy, release or retire started), and the registry refuses that certificate (earlier-installation)",
		},
		"a ramdisk that comes back within the grace takes the wipe": {
			prepare: func(h *harness, node string) { h.left(node) },
			waits:   true, during: func(h *harness, node string) { h.clock.Advance(58 * time.Second); h.joined(node) },
			want: []string{"ramdisk disk.wipe"},
		},
		// The machine rebooted into its disk: its installed OS joins during the grace, and
		// the ramdisk is booted at once, the registry's clock never reaching the grace's end.
		"the installed OS that joins within the grace is booted past at once": {
			prepare: func(h *harness, node string) { h.left(node) },
			waits:   true, during: func(h *harness, node string) { h.clock.Advance(time.Second); h.joins.Joined(node, "node", "") },
			want: boot, gone: "the machine's installed OS joined at 2026-03-01T12:00:02Z, after the ramdisk that joined at 2026-03-01T12:00:01Z: the machine runs its disk",
		},
		"a ramdisk whose registry restarted and that comes back takes the wipe": {
			prepare: func(h *harness, node string) { h.joinedAtAnEarlierRun(node) },
			waits:   true, during: func(h *harness, node string) { h.joined(node) },
			want: []string{"ramdisk disk.wipe"},
		},
		"a ramdisk whose registry restarted and that does not come back is booted again": {
			prepare: func(h *harness, node string) { h.joinedAtAnEarlierRun(node) },
			waits:   true, advance: workflow.ReconnectGrace,
			want: boot, gone: "the ramdisk that joined at 2026-03-01T12:00:01Z holds no session (the registry that held it stopped or died, or it opened none after its join) and it did not come back within 1m0s of 2026-03-01T12:00:01Z",
		},
		// The deploy's kexec an hour ago: the ramdisk's session ended, the installed OS
		// joined moments later. Nothing was waited for: the boot is the usual one.
		"a ramdisk followed by the installed OS long ago is booted as usual": {
			prepare: func(h *harness, node string) {
				h.left(node)
				h.clock.Advance(30 * time.Second)
				h.joins.Joined(node, "node", "")
				h.clock.Advance(time.Hour)
			},
			want: boot,
		},
		// The registry run that held the ramdisk's session stopped and asked it back in
		// 3 minutes, longer than the grace: it is waited for until then and the grace.
		"a ramdisk a stopping registry asked back in 3 minutes that comes back then takes the wipe": {
			prepare: func(h *harness, node string) { h.joinedAtAnEarlierRun(node); h.earlierRunStopped(3 * time.Minute) },
			waits:   true, during: func(h *harness, node string) { h.clock.Advance(3*time.Minute - time.Second); h.joined(node) },
			want: []string{"ramdisk disk.wipe"},
		},
		"a ramdisk a stopping registry asked back in 3 minutes that does not come back is booted again": {
			prepare: func(h *harness, node string) { h.joinedAtAnEarlierRun(node); h.earlierRunStopped(3 * time.Minute) },
			waits:   true, advance: 3*time.Minute + 3*45*time.Second + workflow.ReconnectGrace,
			want: boot, gone: "the ramdisk that joined at 2026-03-01T12:00:01Z held its session with a registry that stopped and asked it to be back by 2026-03-01T12:05:16Z " +
				"(a return refused and tried again included), and it did not come back within 1m0s of 2026-03-01T12:05:16Z",
		},
		// A stream of 8 minutes: a ramdisk refused on its return re-slots itself within
		// 2 minutes (a quarter) after the stream's end, and refused again, within 2
		// minutes of that try, up to three tries: past the grace after the stream. It is
		// waited for until the end, three quarters and the grace: one back 14.5 minutes
		// after the stop, at its third try, takes the wipe, one not back then is booted
		// again.
		"a ramdisk a stopping registry asked back in 8 minutes that re-slotted itself takes the wipe": {
			prepare: func(h *harness, node string) { h.joinedAtAnEarlierRun(node); h.earlierRunStopped(8 * time.Minute) },
			waits:   true, during: func(h *harness, node string) { h.clock.Advance(14*time.Minute + 29*time.Second); h.joined(node) },
			want: []string{"ramdisk disk.wipe"},
		},
		"a ramdisk a stopping registry asked back in 8 minutes that does not come back is booted again": {
			prepare: func(h *harness, node string) { h.joinedAtAnEarlierRun(node); h.earlierRunStopped(8 * time.Minute) },
			waits:   true, advance: 14*time.Minute + workflow.ReconnectGrace,
			want: boot, gone: "the ramdisk that joined at 2026-03-01T12:00:01Z held its session with a registry that stopped and asked it to be back by 2026-03-01T12:14:01Z " +
				"(a return refused and tried again included), and it did not come back within 1m0s of 2026-03-01T12:14:01Z",
		},
		// The longest stream (store.MaxReturnDelay) is waited for no longer than its end,
		// three quarters of it and the grace.
		"a ramdisk a stopping registry asked back past the longest stream is waited for no longer than its bound": {
			prepare: func(h *harness, node string) { h.joinedAtAnEarlierRun(node); h.earlierRunStopped(time.Hour) },
			waits:   true, advance: store.MaxReturnDelay + 3*store.MaxReturnDelay/4 + workflow.ReconnectGrace,
			want: boot, gone: "the ramdisk that joined at 2026-03-01T12:00:01Z held its session with a registry that stopped and asked it to be back by 2026-03-01T12:17:31Z " +
				"(a return refused and tried again included), and it did not come back within 1m0s of 2026-03-01T12:17:31Z",
		},
		// A ramdisk that joined before the retire moved the identity epoch (one a
		// failed deploy left running) holds a certificate the registry now refuses: no
		// grace is waited for it, live or not.
		"a ramdisk of an earlier installation is booted again at once": {
			prepare: func(h *harness, node string) { h.clock.Advance(time.Second) },
			want:    boot, gone: "the ramdisk that joined at 2026-03-01T12:00:01Z holds a certificate of an earlier installation: the machine's identity epoch moved to 1 at 2026-03-01T12:00:02Z " +
				"(a deploy, release or retire started), and the registry refuses that certificate (earlier-installation)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.svc.cfg.Clock = h.clock
			node := h.enroll(nil)
			h.joined(node)
			if tc.prepare != nil {
				tc.prepare(h, node)
			}
			h.machine.forget()
			run, _, err := h.act(node, Retire, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.waits {
				h.waitsForTheRamdisk(run.ID)
				if tc.during != nil {
					tc.during(h, node)
				}
				h.clock.Advance(tc.advance)
			}
			run, n := h.end(run.ID)
			if n.State != store.NodeRetired {
				t.Errorf("node %s, failure %+v", n.State, n.Failure)
			}
			var got []string
			for _, r := range h.machine.got {
				if r.Kind != "power.setPower" || r.Input == `{"action":"cycle"}` {
					got = append(got, r.Role+" "+r.Kind)
				}
			}
			if i := len(got); i > 0 && len(tc.want) < i {
				got = got[:len(tc.want)]
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("commands up to the wipe (-want +got):\n%s", diff)
			}
			var res proto.EnsureRamdiskResult
			if err := json.Unmarshal(run.Steps[0].Result, &res); err != nil {
				t.Fatal(err)
			}
			if want := (proto.EnsureRamdiskResult{Booted: len(tc.want) > 1, Gone: tc.gone}); res != want {
				t.Errorf("metal.ensureRamdisk's result %+v, want %+v", res, want)
			}
		})
	}
}

// joined records that node's ramdisk joined, a second after the registry's clock was.
func (h *harness) joined(node string) {
	h.t.Helper()
	h.clock.Advance(time.Second)
	if err := h.joins.Joined(node, "ramdisk", ""); err != nil {
		h.t.Fatal(err)
	}
}

// left records that the session of node's ramdisk ended here now.
func (h *harness) left(node string) {
	h.t.Helper()
	if err := h.joins.Left(node, "ramdisk", h.clock.Now()); err != nil {
		h.t.Fatal(err)
	}
}

// earlierRun is an earlier run of the registry, started an hour before the harness's
// clock.
var earlierRun = store.Holder{Replica: "rg_1", Started: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)}

// joinedAtAnEarlierRun replaces the ramdisk's join with the one an earlier run of the
// registry recorded, which stopped without recording its end.
func (h *harness) joinedAtAnEarlierRun(node string) {
	h.t.Helper()
	err := h.store.Update(func(tx *store.Tx) error {
		_, err := tx.RecordAgentJoin(node, "ramdisk", earlierRun, time.Time{}, "")
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

// earlierRunStopped records that the earlier run, stopping now, asked its agents to come
// back within returnIn, and within a quarter of the stream after it when refused.
func (h *harness) earlierRunStopped(returnIn time.Duration) {
	h.t.Helper()
	if err := workflow.NewJoinLog(h.store, earlierRun).Stopping(returnIn, proto.ReslotSpread(returnIn)); err != nil {
		h.t.Fatal(err)
	}
}

// waitsForTheRamdisk returns once the registry's clock has two waiters, the step's
// timeout and metal.ensureRamdisk's wait for the ramdisk to come back, and fails the
// test if the workflow went on without waiting.
func (h *harness) waitsForTheRamdisk(id string) {
	h.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); h.clock.Waiters() < 2; time.Sleep(time.Millisecond) {
		var run store.Run
		if err := h.store.View(func(tx *store.Tx) (err error) { run, err = tx.Run(id); return err }); err != nil {
			h.t.Fatal(err)
		}
		if st := run.Steps[0].State; st != store.StepPending && st != store.StepRunning || time.Now().After(deadline) {
			h.t.Fatalf("metal.ensureRamdisk did not wait for the ramdisk to come back: %s", run.Steps[0].State)
		}
	}
}
