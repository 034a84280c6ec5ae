package metal

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/store"
)

// The boot ids of the tests' earlier boot and of the boot a power cycle gives.
const (
	earlierBoot = "0b1e7a52-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
	cycledBoot  = "9f8e7d6c-5b4a-4321-8fed-cba987654321"
)

// relayedYet waits until the machine got a command of kind for role.
func (h *harness) relayedYet(role, kind string) {
	h.t.Helper()
	waitUntil(h.t, role+" "+kind, func() bool { return slices.Contains(h.machine.kinds(), role+" "+kind) })
}

// waitUntil polls cond until it holds, failing the test after 10 seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: gave up", what)
		}
	}
}

// stillOn fails the test when run id leaves step i within a moment.
func (h *harness) stillOn(id string, i int, after string) {
	h.t.Helper()
	// The step may not have started yet: the relay the test waited for is of the step
	// before it, whose answer the engine is still recording.
	started, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	run, err := h.engine.Watch(started, id, 0)
	for err == nil && run.Steps[i].State == store.StepPending {
		run, err = h.engine.Watch(started, id, run.Rev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	for err == nil && ctx.Err() == nil && run.Steps[i].State == store.StepRunning {
		run, err = h.engine.Watch(ctx, id, run.Rev)
	}
	if err != nil || run.Steps[i].State != store.StepRunning {
		h.t.Fatalf("after %s, %s is %s (%v)", after, run.Steps[i].Path(), run.Steps[i].State, err)
	}
}

// rejoin records a session of the machine's agent of role from boot, a second later.
func (h *harness) rejoin(node, role, boot string) {
	h.t.Helper()
	h.clock.Advance(time.Second)
	if err := h.joins.Joined(node, role, boot); err != nil {
		h.t.Fatal(err)
	}
}

// TestEnsureRamdiskCountsANewBootOnly: metal.ensureRamdisk boots a machine whose ramdisk
// is gone (it joined before the machine was last powered off) and waits for a ramdisk to
// join; that gone ramdisk connecting again (it still ran: the power-off never happened,
// the BMC is late) is of the boot the attempt started in and does not end the wait,
// the ramdisk of the boot the cycle gives does.
func TestEnsureRamdiskCountsANewBootOnly(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	h.rejoin(node, "ramdisk", earlierBoot)
	h.clock.Advance(time.Second)
	h.store.Update(func(tx *store.Tx) error {
		_, err := tx.UpdateNode(node, func(n *store.Node) error { n.PoweredAt = tx.Now(); return nil })
		return err
	})
	h.machine.bootsNothing = true
	h.clock.Advance(time.Second)
	run, _, err := h.act(node, Inspect, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.relayedYet("site", "power.setPower")
	h.rejoin(node, "ramdisk", earlierBoot)
	h.stillOn(run.ID, 0, "the gone ramdisk connected again")
	h.rejoin(node, "ramdisk", cycledBoot)
	if run, n := h.end(run.ID); run.State != store.RunSucceeded {
		t.Errorf("the inspection %s, node %s %+v", run.State, n.State, n.Failure)
	}
}

// TestWaitAgentJoinedCountsANewBootOnly: a deploy's wait.agentJoined after its power
// cycle waits for a ramdisk of a boot other than the one the machine's agent was of when
// the run was created: that ramdisk connecting again (before the BMC cycled the machine)
// does not end it, the ramdisk of the next boot does.
func TestWaitAgentJoinedCountsANewBootOnly(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	h.rejoin(node, "ramdisk", earlierBoot)
	h.machine.bootsNothing = true
	h.clock.Advance(time.Second)
	run, err := h.deploy(node, "testdata/gpu-host.json")
	if err != nil {
		t.Fatal(err)
	}
	if run.BootID != earlierBoot {
		t.Fatalf("the run recorded the boot %q, want %q", run.BootID, earlierBoot)
	}
	h.relayedYet("site", "power.setPower")
	wait := slices.IndexFunc(run.Steps, func(s store.RunStep) bool { return s.Use == "wait.agentJoined" })
	h.rejoin(node, "ramdisk", earlierBoot)
	h.stillOn(run.ID, wait, "the ramdisk of before the cycle connected again")
	h.rejoin(node, "ramdisk", cycledBoot)
	if run, n := h.end(run.ID); run.State != store.RunSucceeded {
		t.Errorf("the deploy %s, node %s %+v", run.State, n.State, n.Failure)
	}
}
