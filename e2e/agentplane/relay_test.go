package agentplane

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/google/go-cmp/cmp"
)

// runs counts the runs of each command id on the agent.
type runs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runs) add(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[id]++
}

func (r *runs) get(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

func TestRelay(t *testing.T) {
	e := newEnv(t, agents.Config{})
	var count runs
	e.startAgent("gpu-1", func(c *session.Config) {
		c.Handlers = map[string]session.Handler{
			"echo": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				var in struct{ ID string }
				json.Unmarshal(p, &in)
				count.add(in.ID)
				return p, nil
			},
			"fail": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				return nil, errors.New("disk busy")
			},
			"refuse": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				return nil, proto.Errorf(proto.UnverifiedWipe, "wipe not attested")
			},
		}
	})
	waitFor(t, "session", func() bool { return e.ep.Sessions() == 1 })
	cases := map[string]struct {
		cmd    proto.Command
		result string
		code   proto.Code
	}{
		"result":           {cmd: proto.Command{Kind: "echo", Payload: raw(`{"ID":"a"}`)}, result: `{"ID":"a"}`},
		"own id":           {cmd: proto.Command{ID: "step-7", Kind: "echo", Payload: raw(`{"ID":"step-7"}`)}, result: `{"ID":"step-7"}`},
		"plain error":      {cmd: proto.Command{Kind: "fail"}, code: proto.DriverError},
		"agent's code":     {cmd: proto.Command{Kind: "refuse"}, code: proto.UnverifiedWipe},
		"unknown kind":     {cmd: proto.Command{Kind: "bogus"}, code: proto.Unsupported},
		"bad id":           {cmd: proto.Command{ID: "a/b", Kind: "echo"}, code: proto.InvalidInput},
		"payload not json": {cmd: proto.Command{Kind: "echo", Payload: raw(`{`)}, code: proto.InvalidInput},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := e.ep.Relay(ctx, "gpu-1", proto.RoleNode, tc.cmd)
			if tc.code != "" {
				if proto.CodeOf(err) != tc.code {
					t.Fatalf("got %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.result, string(got)); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("a duplicate id is not run again", func(t *testing.T) {
		cmd := proto.Command{ID: "dup-1", Kind: "echo", Payload: raw(`{"ID":"dup-1"}`)}
		for range 3 {
			got, err := e.ep.Relay(context.Background(), "gpu-1", proto.RoleNode, cmd)
			if err != nil || string(got) != `{"ID":"dup-1"}` {
				t.Fatalf("got %s, %v", got, err)
			}
		}
		if n := count.get("dup-1"); n != 1 {
			t.Fatalf("ran %d times", n)
		}
	})
	t.Run("nothing pending once answered", func(t *testing.T) {
		e.st.View(func(tx *store.Tx) error {
			if p, _ := tx.PendingAgentCommands("gpu-1"); len(p) != 0 {
				t.Errorf("pending: %+v", p)
			}
			return nil
		})
	})
	t.Run("a caller that gives up gets TIMEOUT", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := e.ep.Relay(ctx, "absent", proto.RoleNode, proto.Command{ID: "x1", Kind: "echo"})
		if proto.CodeOf(err) != proto.Timeout || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want TIMEOUT wrapping the deadline", err)
		}
	})
}

// relayAnswer is what a Relay returned.
type relayAnswer struct {
	res json.RawMessage
	err error
}

// relayInBackground relays cmd to node through ep on a goroutine of its own, giving up
// after a minute, and returns the channel its answer comes on.
func relayInBackground(ep *agents.Endpoint, node string, cmd proto.Command) <-chan relayAnswer {
	answers := make(chan relayAnswer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := ep.Relay(ctx, node, proto.RoleNode, cmd)
		answers <- relayAnswer{res, err}
	}()
	return answers
}

// slowCommand is the handler of a command that runs until released; one whose context
// ends first answers with its error.
type slowCommand struct {
	count   runs
	started chan struct{} // a run started
	release chan struct{} // closed: the runs answer "done"
}

func newSlowCommand() *slowCommand {
	return &slowCommand{started: make(chan struct{}, 1), release: make(chan struct{})}
}

func (c *slowCommand) handle(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
	c.count.add("slow")
	c.started <- struct{}{}
	select {
	case <-c.release:
		return raw(`"done"`), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// wantDoneOnce checks that the relay got the answer "done" and the command ran once.
func (c *slowCommand) wantDoneOnce(t *testing.T, got relayAnswer) {
	t.Helper()
	if got.err != nil || string(got.res) != `"done"` {
		t.Fatalf("the relaying registry got %s, %v; want the agent's answer", got.res, got.err)
	}
	if n := c.count.get("slow"); n != 1 {
		t.Errorf("the command ran %d times, want once", n)
	}
}

// TestRelayAcrossDroppedLink relays a slow command, cuts the link while it runs, and
// restores it: the registry resends the command on the new session, the agent attaches
// the resend to the run under way, and the command runs once. The drop does not cancel
// the run (only a withdrawal does): its answer is the one the handler finished with.
func TestRelayAcrossDroppedLink(t *testing.T) {
	e := newEnv(t, agents.Config{})
	proxy := newLinkProxy(t, e.addr)
	slow := newSlowCommand()
	e.startAgent("gpu-1", func(c *session.Config) {
		c.Addr = proxy.Addr()
		c.Handlers = map[string]session.Handler{"slow": slow.handle}
	})
	waitFor(t, "session", func() bool { return e.ep.Sessions() == 1 })
	answers := relayInBackground(e.ep, "gpu-1", proto.Command{ID: "slow-1", Kind: "slow"})
	<-slow.started
	proxy.cut.Store(true)
	waitFor(t, "the registry to drop the session", func() bool { return e.ep.Sessions() == 0 })
	proxy.cut.Store(false)
	waitFor(t, "the agent to reconnect", func() bool { return e.ep.Sessions() == 1 })
	close(slow.release)
	slow.wantDoneOnce(t, <-answers)
}

// TestRelayBeforeConnect relays to an agent that is not connected yet: the command waits
// in the store and goes out when the agent says hello.
func TestRelayBeforeConnect(t *testing.T) {
	e := newEnv(t, agents.Config{})
	var got atomic.Value
	done := make(chan error, 1)
	go func() {
		res, err := e.ep.Relay(context.Background(), "gpu-2", proto.RoleNode, proto.Command{ID: "early", Kind: "echo", Payload: raw(`1`)})
		got.Store(string(res))
		done <- err
	}()
	waitFor(t, "the command to be stored", func() bool {
		var n int
		e.st.View(func(tx *store.Tx) error { p, _ := tx.PendingAgentCommands("gpu-2"); n = len(p); return nil })
		return n == 1
	})
	e.startAgent("gpu-2", func(c *session.Config) {
		c.Handlers = map[string]session.Handler{"echo": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) { return p, nil }}
	})
	if err := <-done; err != nil || got.Load() != "1" {
		t.Fatalf("got %v, %v", got.Load(), err)
	}
}

// TestAnAnsweredCommandRunsNoMore: once a command id is answered, every later relay of it
// gets that answer from the store, and nothing is sent to any agent again, not even to an
// agent process that started after the answer (an agent restarted, or a twin holding a
// copy of the node's certificate), which remembers no result of it. A relay may come
// once every earlier one has returned (a caller coming back for the answer, a registry
// resuming the step after a restart), or while the commit hook of the answer is still
// on its way (a second caller took the answer from the store first; the order in which
// TestTwoAgentsOfOneNode once saw a command run after its answer was returned). Before,
// the store forgot an answered command once a caller had it: the relay stored it anew
// and the later process ran it; in the second case the late hook even handed the relay
// the earlier answer, leaving the new record pending for the next process to run after
// every relay had returned.
func TestAnAnsweredCommandRunsNoMore(t *testing.T) {
	for name, lateHook := range map[string]bool{"asked again": false, "asked again before the answer's hook ran": true} {
		t.Run(name, func(t *testing.T) {
			const node, id = "gpu-1", "step-1"
			cmd := proto.Command{ID: id, Kind: "echo", Payload: raw(`"x"`)}
			// hookHeld, while open, holds this store's commit hooks of the command's answers
			// before the endpoint's (the hooks run in the order they were registered).
			hookHeld := make(chan struct{})
			ca, server := newCA(t)
			dir := t.TempDir()
			e := startEnv(t, &env{t: t, ca: ca, server: server, dir: dir, addr: "127.0.0.1:0", open: func() (*store.Store, error) {
				st, err := store.Open(dir, store.Options{})
				if err == nil && lateHook {
					st.OnAgentCommand(func(c store.AgentCommand) {
						if c.Done {
							<-hookHeld
						}
					})
				}
				return st, err
			}})
			process := func(name string) (*runs, func()) { return echoProcess(t, e, node, id, name) }
			relay := func() relayAnswer {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				res, err := e.ep.Relay(ctx, node, proto.RoleNode, cmd)
				return relayAnswer{res, err}
			}
			wantFirst := func(who string, a relayAnswer) {
				t.Helper()
				if a.err != nil || string(a.res) != `"first"` {
					t.Errorf("%s: %s, %v; want the first process's answer", who, a.res, a.err)
				}
			}

			ranFirst, stopFirst := process("first")
			first := relayInBackground(e.ep, node, cmd)
			if lateHook {
				// A second caller reads the answer from the store and hands it to the first:
				// the endpoint's own hook has not run yet.
				waitFor(t, "the first process's answer stored", func() bool {
					c, err := commandStored(e, node, id)
					return err == nil && c.Done
				})
				wantFirst("the second caller", relay())
				wantFirst("the first caller", <-first)
			} else {
				wantFirst("the first caller", <-first)
				wantFirst("the second caller", relay())
			}
			stopFirst()
			waitFor(t, "the first process's session to end", func() bool { return !e.ep.Connected(node, proto.RoleNode) })

			again := relayInBackground(e.ep, node, cmd)
			var got relayAnswer
			returned := false
			waitFor(t, "the relay asked again to return or to store the command anew", func() bool {
				select {
				case got = <-again:
					returned = true
					return true
				default:
				}
				p, err := pendingIDs(e, node)
				return err == nil && len(p) > 0
			})
			close(hookHeld)
			ranLater, stopLater := process("later")
			defer stopLater()
			if !returned {
				got = <-again
			}
			wantFirst("the relay asked again", got)
			// The later process had its hello: whatever was pending then was sent to it.
			waitFor(t, "nothing pending for the node", func() bool {
				p, err := pendingIDs(e, node)
				return err == nil && len(p) == 0
			})
			if n := ranFirst.get(id); n != 1 {
				t.Errorf("the first process ran %s %d times, want once", id, n)
			}
			if n := ranLater.get(id); n != 0 {
				t.Errorf("the process started after %s was answered ran it %d times, want never", id, n)
			}
		})
	}
}

// echoProcess starts a process of node's agent at e whose echo handler counts its runs
// of command id and answers with name, and waits for its session.
func echoProcess(t *testing.T, e *env, node, id, name string) (ran *runs, stop func()) {
	t.Helper()
	ran = &runs{}
	_, stop = e.runAgent(node, func(c *session.Config) {
		c.Handlers = map[string]session.Handler{"echo": func(context.Context, json.RawMessage) (json.RawMessage, error) {
			ran.add(id)
			return json.Marshal(name)
		}}
	})
	waitFor(t, name+"'s session", func() bool { return e.ep.Connected(node, proto.RoleNode) })
	return ran, stop
}

// pendingIDs are the ids of node's commands that await an answer in e's store.
func pendingIDs(e *env, node string) (ids []string, err error) {
	err = e.st.View(func(tx *store.Tx) error {
		p, err := tx.PendingAgentCommands(node)
		for _, c := range p {
			ids = append(ids, c.ID)
		}
		return err
	})
	return ids, err
}
