package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/better-compute/better-compute/registry/store"
)

// TestResumedAttemptRelaysWhatItMade: a step whose command's input is made anew each time
// it runs (a nonce, and a secret it keeps) relays, when its attempt resumes after the
// registry stopped with the command pending, the input and kept value the command was
// stored with, without making another, and reads the answer by them; the agent is asked
// once. A new attempt of the step makes its own.
func TestResumedAttemptRelaysWhatItMade(t *testing.T) {
	var made atomic.Int32
	quote := func(ctx context.Context, a *Attempt) (json.RawMessage, error) {
		in, out, err := a.RelayMade(ctx, "ramdisk", "quote", "tpm.quote", func() (CommandInput, error) {
			n := made.Add(1)
			return CommandInput{Payload: json.RawMessage(fmt.Sprintf(`{"nonce":%d}`, n)), Kept: json.RawMessage(fmt.Sprintf(`{"secret":%d}`, n))}, nil
		})
		if err != nil {
			return nil, err
		}
		return json.RawMessage(fmt.Sprintf(`{"sent":%s,"kept":%s,"answer":%s}`, in.Payload, in.Kept, out)), nil
	}
	h := newHarness(t, nil)
	h.handlers = map[string]Handler{"attest.boot": quote}
	h.restart()
	h.agent.script = map[string][]outcome{"tpm.quote": {hold}}
	id := h.start(doc(`{"use":"attest.boot","retries":1}`, "", ""))
	cmd := attemptID(id, "main", 0, false, 1) + ":quote"
	h.agent.mu.Lock()
	h.agent.crashOn[cmd] = "running"
	h.agent.mu.Unlock()
	if _, crashed := h.next(id, func(r store.Run) bool { return r.State != store.RunRunning }); !crashed {
		t.Fatal("the registry never stopped with tpm.quote pending")
	}
	h.restart()
	h.agent.waitRunning(t, cmd)
	h.agent.release(cmd)
	run := h.waitEnd(id)
	if want := "succeeded\nsteps[0] attest.boot succeeded tries=1"; summary(run) != want {
		t.Fatalf("run %s, want %s", summary(run), want)
	}
	if got, want := string(run.Steps[0].Result), `{"sent":{"nonce":1},"kept":{"secret":1},"answer":{"released":true}}`; got != want {
		t.Errorf("the resumed attempt read the answer by %s, want %s", got, want)
	}
	if n := made.Load(); n != 1 {
		t.Errorf("the input was made %d times, want once", n)
	}
	h.agent.mu.Lock()
	sends := h.agent.sends[cmd]
	h.agent.mu.Unlock()
	if n := sends; n != 2 {
		t.Errorf("the command was relayed %d times, want twice (before the stop and after)", n)
	}
}
