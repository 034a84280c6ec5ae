package workflow

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// refused is a write too large for an etcd cluster of the defaults (--max-request-bytes
// 1.5 MiB): a JSON document of 1.6 MiB.
var refused = []byte(`{"pad":"` + strings.Repeat("a", 1600<<10) + `"}`)

// TestARefusedWriteFailsTheRun: on an etcd cluster of the defaults, a run whose
// transaction the store refuses, too large for the cluster, fails with INTERNAL naming
// where it stopped and the member flag to raise, instead of staying running with
// nothing driving it (before: the drive stopped, logged, and the run stayed running
// until the registry restarted, to stop again). A step whose result is refused fails,
// the steps after it are skipped, its cleanup runs, and the end is told of the failure
// (a step's result the run cannot keep now fails the step INVALID_INPUT at the result,
// before the store is asked: store.RunTooLarge).
// An end whose transaction is refused (what the end writes for the node, too large)
// fails the run in a transaction of its own, and the end is told of the failure.
func TestARefusedWriteFailsTheRun(t *testing.T) {
	cluster := etcdtest.Shared(t)
	cases := map[string]struct {
		script   map[string][]outcome
		onFinish func(tx *store.Tx, run store.Run) error
		want     string
		// message is what the failure says, in part.
		message []string
	}{
		"a step's result": {
			// A result the run cannot keep fails its attempt (and each retry) with
			// INVALID_INPUT at the result, before the store is asked to take it.
			script: map[string][]outcome{"inventory.refresh": {{result: refused}}},
			want: "failed at steps[0] INVALID_INPUT\nsteps[0] inventory.refresh failed tries=1 INVALID_INPUT\nsteps[1] power.getPower skipped" +
				"\ncleanup[0] boot.cleanUp succeeded tries=1",
			message: []string{"more than the " + strconv.Itoa(store.MaxRunRecord) + " a run keeps", "at steps[0]"},
		},
		"the end": {
			onFinish: func(tx *store.Tx, run store.Run) error {
				if run.State != store.RunSucceeded {
					return nil
				}
				_, err := tx.CreateProfile(store.ProfileRecord{Tenant: "acme", ID: "huge", Version: 1, Document: refused})
				return err
			},
			want: "failed at  INTERNAL\nsteps[0] inventory.refresh succeeded tries=1\nsteps[1] power.getPower succeeded tries=1" +
				"\ncleanup[0] boot.cleanUp succeeded tries=1",
			message: []string{"fails at its end", "too large", "--max-request-bytes"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: etcdtest.Prefix(t)}
			h := newHarnessOn(t, nil, func(opts store.Options) (*store.Store, error) { return store.OpenEtcd(cfg, opts) })
			h.agent.script = tc.script
			var told string
			h.onFinish = func(tx *store.Tx, run store.Run) error {
				h.mu.Lock()
				told = run.State
				h.mu.Unlock()
				if tc.onFinish == nil {
					return nil
				}
				return tc.onFinish(tx, run)
			}
			id := h.start(doc(`{"use":"inventory.refresh","on":"ramdisk"},{"use":"power.getPower"}`, "", `{"use":"boot.cleanUp"}`))
			run := h.waitEnd(id)
			if got := summary(run); got != tc.want {
				t.Errorf("the run:\n%s\nwant:\n%s", got, tc.want)
			}
			if run.Failure == nil {
				t.Fatal("the run has no failure")
			}
			for _, part := range tc.message {
				if !strings.Contains(run.Failure.Error.Message, part) {
					t.Errorf("the failure %q does not say %q", run.Failure.Error.Message, part)
				}
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if told != store.RunFailed {
				t.Errorf("the end was told last of a run %s, want failed", told)
			}
		})
	}
}

// TestAFailedEndIsTriedAgainOrFails: the end of a run whose transaction fails for a
// reason that may pass (UNAVAILABLE: the etcd cluster did not answer) is tried again
// after 1 second, then 2, and the run succeeds; one that fails for good fails the run.
// Before, either left the run running, with nothing driving it, until the registry
// restarted.
func TestAFailedEndIsTriedAgainOrFails(t *testing.T) {
	t.Run("unavailable twice", func(t *testing.T) {
		h := newHarness(t, nil)
		h.onFinish = func(tx *store.Tx, run store.Run) error {
			if h.finishedCount(run.ID) <= 2 {
				return proto.Errorf(proto.Unavailable, "the store's etcd cluster did not confirm the commit")
			}
			return nil
		}
		id := h.start(doc(`{"use":"power.getPower"}`, "", ""))
		for try, wait := range []time.Duration{time.Second, 2 * time.Second} {
			// The end told try+1 times, so the step's own timer (a waiter while it runs)
			// is stopped, and the waiter is the pause before the end is tried again.
			for deadline := time.Now().Add(10 * time.Second); h.finishedCount(id) <= try || h.clock.Waiters() == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("nothing waits to try the end again: %s", summary(h.load(id)))
				}
			}
			if run := h.load(id); run.State != store.RunRunning {
				t.Fatalf("the run ended before its end was tried again: %s", summary(run))
			}
			h.clock.Advance(wait)
		}
		if run := h.waitEnd(id); run.State != store.RunSucceeded || h.finishedCount(id) != 3 {
			t.Errorf("the run: %s, its end told %d times, want succeeded at the third", summary(run), h.finishedCount(id))
		}
	})
	t.Run("for good", func(t *testing.T) {
		h := newHarness(t, nil)
		h.onFinish = func(tx *store.Tx, run store.Run) error {
			if run.State == store.RunSucceeded {
				return proto.Errorf(proto.Internal, "the node's record does not decode")
			}
			return nil
		}
		id := h.start(doc(`{"use":"power.getPower"}`, "", ""))
		run := h.waitEnd(id)
		if run.State != store.RunFailed || run.Failure == nil || !strings.Contains(run.Failure.Error.Message, "the node's record does not decode") {
			t.Errorf("the run: %s, failure %+v", summary(run), run.Failure)
		}
	})
}
