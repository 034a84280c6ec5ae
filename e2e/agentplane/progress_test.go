package agentplane

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
)

// TestProgressAfterReplyAndSessions checks the hooks a registry wires: progress reports
// reach OnProgress before the result, AfterReply runs once the registry has the result,
// and every hello is told to OnSession with the agent's certified role.
func TestProgressAfterReplyAndSessions(t *testing.T) {
	var mu sync.Mutex
	var progress []string
	var sessions []string
	var ticks atomic.Int64 // a second a reading: no report waits out the progress gap
	e := newEnv(t, agents.Config{
		Now: func() time.Time { return time.Unix(ticks.Add(1), 0) },
		OnProgress: func(node, id string, detail json.RawMessage) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, node+" "+id+" "+string(detail))
		},
		OnSession: func(node string, role proto.Role, _ time.Time, _ string) error {
			mu.Lock()
			defer mu.Unlock()
			sessions = append(sessions, node+" "+string(role))
			return nil
		},
	})
	after := make(chan time.Time, 1)
	e.startAgent("gpu-1", func(c *session.Config) {
		c.Handlers = map[string]session.Handler{
			"work": func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
				session.ReportProgress(ctx, map[string]int{"done": 1})
				session.ReportProgress(ctx, map[string]int{"done": 2})
				session.AfterReply(ctx, func() { after <- time.Now() })
				return raw(`{"ok":true}`), nil
			},
		}
	})
	waitFor(t, "session", func() bool { return e.ep.Sessions() == 1 })
	got, err := e.ep.Relay(context.Background(), "gpu-1", proto.RoleNode, proto.Command{ID: "w-1", Kind: "work"})
	answered := time.Now()
	if err != nil || string(got) != `{"ok":true}` {
		t.Fatalf("relay: %s %v", got, err)
	}
	select {
	case at := <-after:
		if at.Before(answered.Add(-time.Second)) {
			t.Errorf("AfterReply ran before the answer arrived")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AfterReply never ran")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{`gpu-1 w-1 {"done":1}`, `gpu-1 w-1 {"done":2}`}
	if len(progress) != 2 || progress[0] != want[0] || progress[1] != want[1] {
		t.Errorf("progress %q, want %q", progress, want)
	}
	if len(sessions) != 1 || sessions[0] != "gpu-1 node" {
		t.Errorf("sessions %q", sessions)
	}
}
