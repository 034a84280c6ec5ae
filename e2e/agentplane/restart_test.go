package agentplane

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
)

// TestRegistryRestart stops the registry (endpoint and store), changes the NodeSpec
// while it is down, and starts it again on the same store and address: the agent
// reconnects, converges to the new generation, and a command that was pending across
// the restart is answered without running twice.
func TestRegistryRestart(t *testing.T) {
	e := newEnv(t, agents.Config{})
	var count runs
	release := make(chan struct{})
	a := e.startAgent("gpu-1", func(c *session.Config) {
		c.Handlers = map[string]session.Handler{
			"slow": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				count.add("slow")
				<-release
				return raw(`"done"`), nil
			},
		}
	})
	e.setSpec("gpu-1", map[string]string{"v": "1"})
	waitFor(t, "generation 1", func() bool { return e.status("gpu-1").ObservedGeneration == 1 })

	// A relay under way when the registry stops: its caller learns the endpoint closed.
	relayed := make(chan error, 1)
	go func() {
		_, err := e.ep.Relay(context.Background(), "gpu-1", proto.Command{ID: "across", Kind: "slow"})
		relayed <- err
	}()
	waitFor(t, "the command to run", func() bool { return count.get("slow") == 1 })
	e.stop()
	if err := <-relayed; proto.CodeOf(err) != proto.InvalidState {
		t.Fatalf("relay across the stop: got %v, want INVALID_STATE", err)
	}

	e.start()
	gen := e.setSpec("gpu-1", map[string]string{"v": "2"})
	waitFor(t, "the agent to converge", func() bool {
		return e.status("gpu-1").ObservedGeneration == gen && a.ObservedGeneration() == gen
	})
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.ep.Relay(ctx, "gpu-1", proto.Command{ID: "across", Kind: "slow"})
	if err != nil || string(res) != `"done"` {
		t.Fatalf("relay after the restart: got %s, %v", res, err)
	}
	if n := count.get("slow"); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}

// TestNewerSessionReplacesOlder connects a second agent with the same node id: the
// registry keeps only the newer session, and the replaced agent keeps away for its
// longest backoff instead of taking the session back at once.
func TestNewerSessionReplacesOlder(t *testing.T) {
	e := newEnv(t, agents.Config{})
	e.setSpec("gpu-1", map[string]string{"v": "1"})
	first := e.startAgent("gpu-1", func(c *session.Config) {
		c.Backoff = session.Backoff{Min: 10 * time.Millisecond, Max: time.Minute}
	})
	waitFor(t, "first agent", func() bool { return first.ObservedGeneration() == 1 })
	second := e.startAgent("gpu-1", nil)
	waitFor(t, "second agent", func() bool { return second.ObservedGeneration() == 1 })
	gen := e.setSpec("gpu-1", map[string]string{"v": "2"})
	waitFor(t, "second agent at generation 2", func() bool { return second.ObservedGeneration() == gen })
	time.Sleep(200 * time.Millisecond)
	if n, got := e.ep.Sessions(), first.ObservedGeneration(); n != 1 || got != 1 {
		t.Fatalf("%d sessions; the replaced agent is at generation %d, want 1", n, got)
	}
}
