package workflow

import (
	"context"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/google/go-cmp/cmp"
)

// The boot ids of the tests: the machine's boot before a power action, and after it.
const (
	bootBefore = "0b1e7a52-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
	bootAfter  = "9f8e7d6c-5b4a-4321-8fed-cba987654321"
)

// rejoinDoc powers the machine off and on again and awaits its rejoin.
var rejoinDoc = doc(`{"use":"power.setPower","with":{"action":"cycle"},"await":"rejoin","timeout":"15m"}`, "", "")

// awaitingRejoin waits until step 0 of run id awaits the rejoin and returns its attempt.
func (h *harness) awaitingRejoin(id string) store.Attempt {
	h.t.Helper()
	run := h.waitFor(id, func(r store.Run) bool { a := r.Steps[0].Attempts; return len(a) == 1 && a[0].Awaiting })
	return run.Steps[0].Attempts[0]
}

// stillAwaiting fails the test when step 0 of run id ends within a moment: what an
// agent's join that does not count must leave.
func (h *harness) stillAwaiting(id, after string) {
	h.t.Helper()
	run := h.load(id)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	for ctx.Err() == nil {
		var err error
		if run, err = h.engine.Watch(ctx, id, run.Rev); err != nil {
			h.t.Fatal(err)
		}
		if run.Steps[0].State != store.StepRunning {
			h.t.Fatalf("after %s the rejoin counted: %s", after, summary(run))
		}
	}
}

// join records a session of the machine's agent of role from boot, a second after the
// last, and returns when it joined.
func (h *harness) join(role, boot string) time.Time {
	h.t.Helper()
	h.clock.Advance(time.Second)
	if err := h.joins.Joined(h.node, role, boot); err != nil {
		h.t.Fatal(err)
	}
	return h.clock.Now()
}

// TestAwaitRejoinCountsANewBootOnly: a step that awaits the machine's rejoin after a power
// cycle records the boot its agent was of as it started; that agent connecting again
// (its link dropped, its registry replica died, the BMC has not cycled the machine yet)
// is of that boot and leaves the step waiting, also after a registry restart resumed the
// step; the agent of the boot that follows ends it. Agents that tell no boot (of an
// earlier version) count as every join did.
func TestAwaitRejoinCountsANewBootOnly(t *testing.T) {
	cases := map[string]struct {
		// before is the boot the machine's agent told before the run, reconnect the
		// one it tells connecting again while the step waits, after the one its next
		// boot tells.
		before, reconnect, after string
		// restart restarts the registry while the step waits, before the reconnect.
		restart bool
		// counted is the join that ends the step: "reconnect" or "after".
		counted string
	}{
		"a reconnect of the same boot does not count, the next boot does": {
			before: bootBefore, reconnect: bootBefore, after: bootAfter, counted: "after"},
		"resumed after a restart, a reconnect of the same boot still does not count": {
			before: bootBefore, reconnect: bootBefore, after: bootAfter, restart: true, counted: "after"},
		"an agent that tells no boot: its reconnect counts, as before": {
			before: "", reconnect: "", after: "", counted: "reconnect"},
		"no boot known at the step's start: a join of any boot counts": {
			before: "", reconnect: bootBefore, after: bootAfter, counted: "reconnect"},
		"an agent of an earlier version returning without a boot counts": {
			before: bootBefore, reconnect: "", after: bootAfter, counted: "reconnect"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.join("node", tc.before)
			h.clock.Advance(time.Second)
			id := h.start(rejoinDoc)
			if att := h.awaitingRejoin(id); att.BootID != tc.before {
				t.Fatalf("the attempt recorded the boot %q, want %q (the machine's agent's as the step started)", att.BootID, tc.before)
			}
			if tc.restart {
				h.restart()
			}
			at := h.join("node", tc.reconnect)
			if tc.counted == "after" {
				h.stillAwaiting(id, "a reconnect of the boot the step started in")
				at = h.join("node", tc.after)
			}
			run := h.waitEnd(id)
			if diff := cmp.Diff("succeeded\nsteps[0] power.setPower succeeded tries=1", summary(run)); diff != "" {
				t.Fatalf("run (-want +got):\n%s", diff)
			}
			if got := run.Steps[0].Attempts[0].FinishedAt; !got.Equal(at) {
				t.Errorf("the step ended at %s, want at the %s join (%s)", got, tc.counted, at)
			}
		})
	}
}

// TestCreateRecordsTheMachinesBoot: a run records the boot of the machine's agent that
// joined last when it was created, whichever its role, for wait.agentJoined.
func TestCreateRecordsTheMachinesBoot(t *testing.T) {
	h := newHarness(t, nil)
	h.join("node", bootBefore)
	h.join("ramdisk", bootAfter)
	id := h.start(doc(`{"use":"power.getPower"}`, "", ""))
	if got := h.load(id).BootID; got != bootAfter {
		t.Errorf("the run recorded the boot %q, want the ramdisk's %q (the last to join)", got, bootAfter)
	}
}

// TestWaitJoinedBoot checks which joins end a wait for the machine's next boot: of a role
// asked for, at or after since, and of a boot other than the one it started in, unless
// either tells none.
func TestWaitJoinedBoot(t *testing.T) {
	fake := clock.NewFake(epoch)
	st := storetest.Open(t, store.Options{Now: fake.Now})
	log := NewJoinLog(st, store.Holder{})
	since := fake.Now()
	cases := []struct {
		name, role, joined, boot, waitBoot string
		want                               bool
	}{
		{"the same boot", "node", "node", bootBefore, bootBefore, false},
		{"the same boot, any role", "", "ramdisk", bootBefore, bootBefore, false},
		{"another boot", "node", "node", bootAfter, bootBefore, true},
		{"another boot, any role", "", "ramdisk", bootAfter, bootBefore, true},
		{"another boot of another role", "node", "ramdisk", bootAfter, bootBefore, false},
		{"a join that tells no boot", "node", "node", "", bootBefore, true},
		{"a wait that knows no boot", "node", "node", bootBefore, "", true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			node := "nd_" + string(rune('a'+i))
			if err := log.Joined(node, c.joined, c.boot); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if got := log.WaitJoined(ctx, node, c.role, since, c.waitBoot) == nil; got != c.want {
				t.Errorf("a %s join from %q, waiting for %q since a boot of %q: counted %v, want %v", c.joined, c.boot, c.role, c.waitBoot, got, c.want)
			}
		})
	}
}
