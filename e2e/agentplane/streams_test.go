package agentplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
)

// maxCommands is the agent's bound on the command streams the registry may have open
// at once.
const maxCommands = proto.MaxAgentCommands

// TestCommandStreamsEnd relays thousands of commands of every kind through one agent
// session, and more through the next session after a dropped link cut some short, and
// checks after each batch that every command stream ended on both sides: the agent
// takes maxCommands commands at once again, which QUIC allows only when it counts none
// of the earlier streams as open. A stream left half open (a command without an
// after-reply action once left its read side open) is a slot lost for the life of the
// session, and the 17th command of a session never arrived.
func TestCommandStreamsEnd(t *testing.T) {
	e := newEnv(t, agents.Config{})
	proxy := newLinkProxy(t, e.addr)
	var afters atomic.Int64
	var held gate
	held.init()
	e.startAgent("site-1", func(c *session.Config) {
		c.Addr = proxy.Addr()
		c.Handlers = map[string]session.Handler{
			"echo": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) { return p, nil },
			"progress": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				session.ReportProgress(ctx, map[string]int{"done": 1})
				return p, nil
			},
			"after": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				session.AfterReply(ctx, func() { afters.Add(1) })
				return p, nil
			},
			"fail": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				return nil, errors.New("bmc unreachable")
			},
			"refuse": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				return nil, proto.Errorf(proto.UnverifiedWipe, "wipe not attested")
			},
			"garbage": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				return raw(`{`), nil
			},
			"hold": func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
				held.wait()
				return p, nil
			},
		}
	})
	waitFor(t, "session", func() bool { return e.ep.Sessions() == 1 })

	wantAfters := relayMix(t, e, 0, 2400)
	waitFor(t, "the after-reply actions", func() bool { return afters.Load() == wantAfters })
	allSlotsFree(t, e, &held, "first session")

	// Commands under way when the link drops are resent on the next session and attach
	// to their runs; the old session's streams end with its connection.
	answers := make(chan error, 4)
	for i := range 4 {
		go func() {
			id := fmt.Sprintf("cut-%d", i)
			got, err := e.ep.Relay(context.Background(), "site-1", proto.RoleNode, proto.Command{ID: id, Kind: "hold", Payload: raw(`"` + id + `"`)})
			if err == nil && string(got) != `"`+id+`"` {
				err = fmt.Errorf("%s answered %s", id, got)
			}
			answers <- err
		}()
	}
	waitFor(t, "the commands to run", func() bool { return held.inside() == 4 })
	proxy.cut.Store(true)
	waitFor(t, "the registry to drop the session", func() bool { return e.ep.Sessions() == 0 })
	proxy.cut.Store(false)
	waitFor(t, "the agent to reconnect", func() bool { return e.ep.Sessions() == 1 })
	held.release()
	for range 4 {
		if err := <-answers; err != nil {
			t.Fatalf("a command under way at the drop: %v", err)
		}
	}

	wantAfters += relayMix(t, e, 2400, 1200)
	waitFor(t, "the after-reply actions", func() bool { return afters.Load() == wantAfters })
	allSlotsFree(t, e, &held, "the session after the reconnect")
}

// mix is the round of commands relayMix repeats: every outcome the agent plane has.
var mix = []struct {
	kind    string
	payload string // %d is the command's number
	code    proto.Code
}{
	{kind: "echo", payload: `{"n":%d}`},
	{kind: "progress", payload: `{"n":%d}`},
	{kind: "after", payload: `{"n":%d}`},
	{kind: "fail", code: proto.DriverError},
	{kind: "refuse", code: proto.UnverifiedWipe},
	{kind: "garbage", code: proto.DriverError},
	{kind: "bogus", code: proto.Unsupported},                 // no handler on the agent
	{kind: "echo", payload: `{%d`, code: proto.InvalidInput}, // refused before it is sent
}

// relayMix relays commands first .. first+n-1, cycling through mix, from eight callers
// at once, and checks each answer. It returns how many asked for an after-reply action.
func relayMix(t *testing.T, e *env, first, n int) (afters int64) {
	t.Helper()
	next := make(chan int)
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if failed.Load() {
					continue
				}
				if err := relayOne(e, i); err != nil && !failed.Swap(true) {
					t.Errorf("command %d: %v", i, err)
				}
			}
		})
	}
	for i := first; i < first+n && !failed.Load(); i++ {
		if mix[i%len(mix)].kind == "after" {
			afters++
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if failed.Load() {
		t.FailNow()
	}
	return afters
}

// relayOne relays command i of the mix and checks its answer.
func relayOne(e *env, i int) error {
	m := mix[i%len(mix)]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	payload := raw(fmt.Sprintf(m.payload, i))
	if m.payload == "" {
		payload = nil
	}
	got, err := e.ep.Relay(ctx, "site-1", proto.RoleNode, proto.Command{Kind: m.kind, Payload: payload})
	switch {
	case m.code != "" && proto.CodeOf(err) != m.code:
		return fmt.Errorf("%s: got %v, want %s", m.kind, err, m.code)
	case m.code == "" && err != nil:
		return fmt.Errorf("%s: %w", m.kind, err)
	case m.code == "" && string(got) != string(payload):
		return fmt.Errorf("%s: answered %s, want %s", m.kind, got, payload)
	}
	return nil
}

// allSlotsFree relays maxCommands commands that hold until all of them run on the agent
// at once, then lets them finish.
func allSlotsFree(t *testing.T, e *env, held *gate, when string) {
	t.Helper()
	answers := make(chan error, maxCommands)
	for range maxCommands {
		go func() {
			_, err := e.ep.Relay(context.Background(), "site-1", proto.RoleNode, proto.Command{Kind: "hold", Payload: raw(`1`)})
			answers <- err
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for held.inside() < maxCommands {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d commands reached the agent at once: the other streams never ended", when, held.inside(), maxCommands)
		}
		time.Sleep(5 * time.Millisecond)
	}
	held.release()
	for range maxCommands {
		if err := <-answers; err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
}

// gate holds the handlers that wait on it until release.
type gate struct {
	mu   sync.Mutex
	in   int
	open chan struct{}
}

func (g *gate) init() { g.open = make(chan struct{}) }

// wait counts the caller in and blocks until the next release.
func (g *gate) wait() {
	g.mu.Lock()
	g.in++
	open := g.open
	g.mu.Unlock()
	<-open
}

// inside is how many callers wait.
func (g *gate) inside() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.in
}

// release lets every waiting caller go.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.open)
	g.open, g.in = make(chan struct{}), 0
}
