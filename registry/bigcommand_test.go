package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/testkit"
)

// TestACommandPastAnAgentFrameFailsItsRelayAtOnce: a machine's agent is connected, over
// real QUIC, and a command is relayed to it whose message takes more than an agent frame
// carries (proto.MaxFrame). Its relay fails at once, INVALID_INPUT too-large naming the
// command's kind and size, the command is recorded answered so (no later session of the
// agent is sent it), the registry logs it as a warning with the node and the kind, and
// the session goes on: the next command reaches the agent and is answered. Before, the
// failed write was taken for a dropped link: the command stayed pending, a debug line
// said so, every session of the agent failed to deliver it again, and its step waited
// out its timeout (a deploy.image's hour) with no visible cause.
func TestACommandPastAnAgentFrameFailsItsRelayAtOnce(t *testing.T) {
	var logged testkit.SyncBuffer
	f := serveBusy(t, Config{Log: slog.New(slog.NewTextHandler(&logged, nil))})
	storetest.Fill(t, f.r.st)
	node, creds := f.provisioned("52:54:00:00:07:31")
	ep := f.r.plane.ep
	c := dialCrafted(t, creds)
	c.write(c.session, `{"type":"hello","hello":{"observedGeneration":0}}`)
	f.wait("the agent's session", func() bool { return ep.Connected(node, proto.RoleNode) })

	huge := json.RawMessage(`"` + strings.Repeat("a", proto.MaxFrame) + `"`)
	// Before, the relay waited for an answer until its context ended: TIMEOUT. Its
	// deadline is long enough that a loaded machine's slowness is not mistaken for that.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := ep.Relay(ctx, node, proto.RoleNode, proto.Command{ID: "too-big", Kind: "echo", Payload: huge})
	e := proto.AsError(err)
	if e.Code != proto.InvalidInput || e.Details.Reason != proto.ReasonTooLarge || !strings.Contains(e.Message, "echo") ||
		!strings.Contains(e.Message, fmt.Sprint(proto.MaxFrame)) {
		t.Errorf("relaying a command past an agent frame: %v; want INVALID_INPUT too-large naming echo and its size, before the relay's deadline", err)
	}
	stored, err := f.agentCommand(node, "too-big")
	if err != nil || !stored.Done || stored.Error == nil || stored.Error.Details.Reason != proto.ReasonTooLarge {
		t.Errorf("the command past an agent frame: done %v, error %v (%v); want it answered too-large, not pending for the next session", stored.Done, stored.Error, err)
	}
	if line := logLine(logged.String(), "too-big"); !strings.Contains(line, "level=WARN") || !strings.Contains(line, "node="+node) || !strings.Contains(line, "kind=echo") {
		t.Errorf("the command past an agent frame is logged as %q; want a warning naming node %s and kind echo", line, node)
	}

	if !ep.Connected(node, proto.RoleNode) {
		t.Fatal("the session ended with the command past an agent frame")
	}
	answered := make(chan error, 1)
	go func() {
		_, err := ep.Relay(ctx, node, proto.RoleNode, proto.Command{ID: "small", Kind: "echo", Payload: []byte(`"hi"`)})
		answered <- err
	}()
	s, cmd := c.command()
	if cmd.ID != "small" {
		t.Fatalf("the agent was sent %s, want the command after the one past its frame", cmd.ID)
	}
	c.write(s, `{"type":"result","result":{"id":"small","result":"hi"}}`)
	if err := <-answered; err != nil {
		t.Errorf("the command after the one past an agent frame: %v", err)
	}
}

// logLine is the first line of log that holds s, or "".
func logLine(log, s string) string {
	for line := range strings.Lines(log) {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
