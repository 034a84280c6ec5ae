package agentplane

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// etcdReplicas are n agent endpoints, each over its own client of one etcd store (a
// real three-member cluster), sharing their CA, certificate and endpoint keys: n
// replicas of one registry.
func etcdReplicas(t testing.TB, n int) []*env {
	t.Helper()
	cluster := etcdtest.Start(t)
	cfg := store.EtcdConfig{Endpoints: cluster.Endpoints, Prefix: "agentplane"}
	open := func() (*store.Store, error) { return store.OpenEtcd(cfg, store.Options{}) }
	ca, server := newCA(t)
	r := make([]*env, n)
	for i := range r {
		r[i] = startEnv(t, &env{t: t, ca: ca, server: server, dir: t.TempDir(), addr: "127.0.0.1:0", open: open})
	}
	return r
}

// TestRelayThroughAnotherReplica: an agent holds its session with one replica only; a
// command the other replica relays (as the replica driving a workflow does) is sent by
// the replica holding the session, once, and its answer wakes the relaying replica; a
// NodeSpec the other replica writes is pushed by the session's replica, and the other's
// WaitObserved returns once the agent applied it.
func TestRelayThroughAnotherReplica(t *testing.T) {
	r := etcdReplicas(t, 2)
	holder, driver := r[0], r[1]
	var count runs
	holder.startAgent("gpu-1", func(c *session.Config) {
		c.Handlers = map[string]session.Handler{
			"echo": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				count.add(string(p))
				return p, nil
			},
		}
	})
	waitFor(t, "a session with the first replica", func() bool { return holder.ep.Sessions() == 1 })
	if driver.ep.Sessions() != 0 {
		t.Fatal("the agent has a session with the second replica")
	}

	for i, id := range []string{"wf_1:main.0:a1:echo", "wf_1:main.1:a1:echo"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		payload := json.RawMessage(fmt.Sprintf(`{"step":%d}`, i))
		got, err := driver.ep.Relay(ctx, "gpu-1", proto.RoleNode, proto.Command{ID: id, Kind: "echo", Payload: payload})
		cancel()
		if err != nil || string(got) != string(payload) {
			t.Fatalf("relay %s through the replica without the session: %s, %v", id, got, err)
		}
		if n := count.get(string(payload)); n != 1 {
			t.Errorf("command %s ran %d times, want once", id, n)
		}
	}

	gen := driver.setSpec("gpu-1", map[string]string{"written-by": "the second replica"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := driver.ep.WaitObserved(ctx, "gpu-1"); err != nil {
		t.Fatalf("WaitObserved at the replica without the session: %v", err)
	}
	if st := driver.status("gpu-1"); st.ObservedGeneration != gen {
		t.Errorf("observed generation %d, want %d", st.ObservedGeneration, gen)
	}
}

// TestRelayPendingAcrossReplicaDeath: three replicas; an agent given every replica's
// endpoint holds its session with one; another relays a slow command (as the replica
// driving a workflow does), which the agent starts; the replica holding the session
// dies (its endpoint closed while the command runs). The agent reconnects to one of
// the two others, which sends the pending command on the new session; the agent
// attaches it to the run under way (or answers it from the result it kept, when the
// run ended while it was disconnected); the answer reaches the relaying replica, and
// the command ran once.
func TestRelayPendingAcrossReplicaDeath(t *testing.T) {
	for _, tc := range []struct {
		name string
		// finishEarly ends the run as soon as the replica is gone, before the agent is
		// back: its answer then has no session to go on.
		finishEarly bool
	}{{"answered after the reconnect", false}, {"finished while disconnected", true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := etcdReplicas(t, 3)
			slow := newSlowCommand()
			r[0].startAgent("gpu-1", func(c *session.Config) {
				c.Addr, c.Addrs = r[0].addr, []string{r[1].addr, r[2].addr}
				c.Handlers = map[string]session.Handler{"slow": slow.handle}
			})
			sessions := func(except *env) (n int) {
				for _, e := range r {
					if e != except && e.ep != nil {
						n += e.ep.Sessions()
					}
				}
				return n
			}
			waitFor(t, "a session", func() bool { return sessions(nil) == 1 })
			var holder, driver *env
			for _, e := range r {
				switch {
				case e.ep.Sessions() == 1:
					holder = e
				case driver == nil:
					driver = e
				}
			}

			answers := relayInBackground(driver.ep, "gpu-1", proto.Command{ID: "wf_1:main.0:a1:slow", Kind: "slow"})
			<-slow.started
			holder.stop()
			if tc.finishEarly {
				close(slow.release)
			}
			waitFor(t, "a session with another replica", func() bool { return sessions(holder) == 1 })
			if !tc.finishEarly {
				close(slow.release)
			}
			slow.wantDoneOnce(t, <-answers)
			driver.st.View(func(tx *store.Tx) error {
				if p, _ := tx.PendingAgentCommands("gpu-1"); len(p) != 0 {
					t.Errorf("still pending after the answer: %+v", p)
				}
				return nil
			})
		})
	}
}
