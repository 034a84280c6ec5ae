package workflow

import (
	"errors"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// TestRelayContextSaysWhy: the context a step's relay runs in ends with a *proto.Error
// cause when the step times out (TIMEOUT) or its run is cancelled (INVALID_STATE,
// reason cancelled), which withdraws the command (Relay); and with none when the engine
// stops (a registry stopping), which leaves the command pending for the registry that
// takes the step over.
func TestRelayContextSaysWhy(t *testing.T) {
	cases := map[string]struct {
		end    func(h *harness, id string)
		code   proto.Code
		reason string
	}{
		"timed out": {
			end: func(h *harness, id string) {
				h.clock.BlockUntil(1)
				h.clock.Advance(30 * time.Second)
				h.waitEnd(id)
			},
			code: proto.Timeout,
		},
		"cancelled": {
			end: func(h *harness, id string) {
				err := h.store.Update(func(tx *store.Tx) error { _, err := h.engine.Cancel(tx, id); return err })
				if err != nil {
					h.t.Fatal(err)
				}
				h.engine.Abort(id)
				h.waitEnd(id)
			},
			code:   proto.InvalidState,
			reason: proto.ReasonCancelled,
		},
		"the engine stops": {
			end: func(h *harness, id string) { h.cancel(); h.engine.Wait() },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.agent.script = map[string][]outcome{"power.getPower": {hold}}
			id := h.start(doc(`{"use":"power.getPower","timeout":"30s"}`, "", ""))
			cmd := attemptID(id, "main", 0, false, 1)
			h.agent.waitRunning(t, cmd)
			tc.end(h, id)
			var why error
			for deadline := time.Now().Add(10 * time.Second); why == nil && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				why = h.agent.cause(cmd)
			}
			e, coded := errors.AsType[*proto.Error](why)
			switch {
			case tc.code == "" && coded:
				t.Errorf("the relay's context ended with %v, a *proto.Error, which would withdraw the command", why)
			case tc.code != "" && (!coded || e.Code != tc.code || e.Details.Reason != tc.reason):
				t.Errorf("the relay's context ended with %v, want a *proto.Error %s reason %q", why, tc.code, tc.reason)
			}
			if why == nil {
				t.Error("the relay's context never ended")
			}
		})
	}
}
