package agentplane

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
)

// TestATenantHoldsItsShareOfTheSite: tenant beta, whose machines' BMCs never answer,
// relays more commands to its site's agent than the agent takes at once; they all hang.
// Tenant acme's power command at the same site still reaches the agent and is answered
// while beta's hang: beta holds at most proto.TenantCommandShare of the site agent's
// command slots. beta's commands beyond its share wait their turn, and run once its
// own earlier ones end.
func TestATenantHoldsItsShareOfTheSite(t *testing.T) {
	e := newEnv(t, agents.Config{})
	var hung gate
	hung.init()
	e.startAgent("site-1", func(c *session.Config) {
		c.Handlers = map[string]session.Handler{
			// beta's BMCs never answer.
			"beta.power": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				hung.wait()
				return p, nil
			},
			"acme.power": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) { return p, nil },
		}
	})
	t.Cleanup(hung.release) // before the agent stops, which waits for its commands
	waitFor(t, "session", func() bool { return e.ep.Sessions() == 1 })

	beta := make(chan error, proto.MaxAgentCommands+4)
	for i := range proto.MaxAgentCommands + 4 {
		go func() {
			_, err := e.ep.Relay(context.Background(), "site-1", proto.RoleNode, proto.Command{ID: fmt.Sprintf("beta-%d", i), Kind: "beta.power", Tenant: "beta", Payload: raw(`1`)})
			beta <- err
		}()
	}
	waitFor(t, "beta's commands to hang", func() bool { return hung.inside() >= proto.TenantCommandShare })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := e.ep.Relay(ctx, "site-1", proto.RoleNode, proto.Command{ID: "acme-1", Kind: "acme.power", Tenant: "acme", Payload: raw(`"on"`)})
	if err != nil || string(got) != `"on"` {
		t.Fatalf("acme's command while beta's hang: %s, %v", got, err)
	}
	if n := hung.inside(); n > proto.TenantCommandShare {
		t.Errorf("beta holds %d of the site's %d command slots, more than its share of %d", n, proto.MaxAgentCommands, proto.TenantCommandShare)
	}
	for answered := 0; answered < proto.MaxAgentCommands+4; {
		waitFor(t, "beta's next commands to run", func() bool { return hung.inside() > 0 || len(beta) > 0 })
		hung.release()
		for len(beta) > 0 {
			if err := <-beta; err != nil {
				t.Fatalf("beta's command: %v", err)
			}
			answered++
		}
	}
}
