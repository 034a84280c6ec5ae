package agentplane

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
)

// TestAnAnswerPastItsFrameFailsOnce: a handler whose answer is larger than a frame
// (proto.MaxFrame), a result or an error's text, has its command answered at once with
// the error the registry takes (a result: INVALID_INPUT at result, reason too-large,
// naming its size and the bound; an error: its text cut), as one past proto.MaxStepResult
// and within a frame is. The command is answered, so it is never sent again: the handler
// ran once, and an agent that starts after does not run it. Before, the answer could
// not be written, the command stayed pending with no answer until its caller's timeout,
// and the agent's next run ran it again (a second wipe or power cycle of one step).
func TestAnAnswerPastItsFrameFailsOnce(t *testing.T) {
	e := newEnv(t, agents.Config{})
	var count runs
	text := func(n int) string { return strings.Repeat("a", n) }
	handlers := map[string]session.Handler{
		"result-5MiB": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			count.add("result-5MiB")
			return json.RawMessage(`"` + text(5<<20) + `"`), nil
		},
		"result-1MiB": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			count.add("result-1MiB")
			return json.RawMessage(`"` + text(1<<20) + `"`), nil
		},
		"error-5MiB": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			count.add("error-5MiB")
			return nil, errors.New(text(5 << 20))
		},
	}
	_, stop := e.runAgent("gpu-1", func(c *session.Config) { c.Handlers = handlers })
	waitFor(t, "session", func() bool { return e.ep.Sessions() == 1 })
	cases := map[string]struct {
		code          proto.Code
		reason, path  string
		names         []string // what the message says
		longerMessage int      // the longest message taken
	}{
		"result-5MiB": {code: proto.InvalidInput, reason: proto.ReasonTooLarge, path: "result", names: []string{"5242882 bytes", "131072"}, longerMessage: 1 << 10},
		"result-1MiB": {code: proto.InvalidInput, reason: proto.ReasonTooLarge, path: "result", names: []string{"1048578 bytes", "131072"}, longerMessage: 1 << 10},
		"error-5MiB":  {code: proto.DriverError, names: []string{"bytes cut"}, longerMessage: proto.MaxErrorMessage},
	}
	for kind, tc := range cases {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := e.ep.Relay(ctx, "gpu-1", proto.RoleNode, proto.Command{ID: "big-" + kind, Kind: kind})
			got := proto.AsError(err)
			if got.Code != tc.code || got.Details.Reason != tc.reason || got.Details.Path != tc.path {
				t.Fatalf("the answer: %.300v; want %s at %q, reason %q", err, tc.code, tc.path, tc.reason)
			}
			for _, s := range tc.names {
				if !strings.Contains(got.Message, s) {
					t.Errorf("the error %.300q does not say %q", got.Message, s)
				}
			}
			if len(got.Message) > tc.longerMessage {
				t.Errorf("the error's message takes %d bytes, more than %d", len(got.Message), tc.longerMessage)
			}
		})
	}
	e.st.View(func(tx *store.Tx) error {
		if p, _ := tx.PendingAgentCommands("gpu-1"); len(p) != 0 {
			t.Errorf("pending after their answers: %d commands, %s first", len(p), p[0].ID)
		}
		return nil
	})
	// An agent that starts after (a restarted process, which remembers no result) runs
	// none of them again: its hello's resends come before the answer to a command relayed
	// to it (big-after, the second run of result-1MiB).
	stop()
	waitFor(t, "the session's end", func() bool { return e.ep.Sessions() == 0 })
	e.startAgent("gpu-1", func(c *session.Config) { c.Handlers = handlers })
	waitFor(t, "the next session", func() bool { return e.ep.Sessions() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.ep.Relay(ctx, "gpu-1", proto.RoleNode, proto.Command{ID: "big-after", Kind: "result-1MiB"}); proto.CodeOf(err) != proto.InvalidInput {
		t.Fatalf("a command relayed to the next session: %.300v", err)
	}
	for kind, want := range map[string]int{"result-5MiB": 1, "error-5MiB": 1, "result-1MiB": 2} {
		if n := count.get(kind); n != want {
			t.Errorf("%s ran %d times, want %d", kind, n, want)
		}
	}
}
