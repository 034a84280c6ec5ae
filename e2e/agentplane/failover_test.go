package agentplane

import (
	"crypto/rand"
	"testing"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/registry/agents"
)

// replicas are two registries' agent endpoints on loopback, each over a store of its
// own, that share their CA, certificate and endpoint keys as the replicas of one
// registry do (sealed in their shared store).
func replicas(t *testing.T) [2]*env {
	t.Helper()
	var keys agents.Keys
	rand.Read(keys.StatelessReset[:])
	rand.Read(keys.SessionTickets[:])
	first := newEnv(t, agents.Config{Keys: &keys})
	second := &env{t: t, ca: first.ca, server: first.server, dir: t.TempDir(), addr: "127.0.0.1:0", hooks: first.hooks}
	second.start()
	t.Cleanup(func() {
		if second.ep != nil {
			second.stop()
		}
	})
	return [2]*env{first, second}
}

// TestAgentFailsOverToAnotherReplica: an agent given both replicas' endpoints connects to
// one; when that one stops, it connects to the other, resuming its TLS session there
// (the replicas share the session ticket key), and applies the NodeSpec the other
// pushes.
func TestAgentFailsOverToAnotherReplica(t *testing.T) {
	r := replicas(t)
	for _, e := range r {
		e.setSpec("gpu-1", map[string]string{"replica": "the first"})
	}
	a := r[0].startAgent("gpu-1", func(c *session.Config) { c.Addr, c.Addrs = r[0].addr, []string{r[1].addr} })
	waitFor(t, "a session", func() bool { return r[0].ep.Sessions()+r[1].ep.Sessions() == 1 })
	gone, other := r[0], r[1]
	if r[1].ep.Sessions() == 1 {
		gone, other = r[1], r[0]
	}
	waitFor(t, "the first NodeSpec applied", func() bool { return a.lastApplied().Labels["replica"] == "the first" })

	gone.stop()
	waitFor(t, "a session with the other replica", func() bool { return other.ep.Sessions() == 1 })
	gen := other.setSpec("gpu-1", map[string]string{"replica": "the other"})
	waitFor(t, "the other replica's NodeSpec applied", func() bool {
		s := a.lastApplied()
		return s.Generation == gen && s.Labels["replica"] == "the other"
	})
	if h := other.ep.Handshakes(); h.Resumed != 1 {
		t.Errorf("the other replica's handshakes: %+v, want the session resumed", h)
	}
}
