package agentplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/quic-go/quic-go"
)

// TestRevokedIdentity revokes the identity of a connected node, as metal.revokeIdentity
// does: the revocation's commit ends its session with CloseRevoked, and a new session
// with the same, still unexpired, certificate is refused the same way and never
// registered.
func TestRevokedIdentity(t *testing.T) {
	e := newEnv(t, agents.Config{})
	storetest.Fill(t, e.st)
	node := storetest.Node(t, e.st, store.Node{MACs: []string{"52:54:00:00:00:01"}}).ID
	live := helloOverQUIC(t, e, node)
	waitFor(t, "the session", func() bool { return e.ep.Sessions() == 1 })

	err := e.st.Update(func(tx *store.Tx) error {
		_, err := tx.UpdateNode(node, func(n *store.Node) error { n.IdentityRevokedAt = tx.Now(); return nil })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	closedRevoked(t, live)
	if n := e.ep.Sessions(); n != 0 {
		t.Errorf("%d sessions after the revocation", n)
	}

	again := helloOverQUIC(t, e, node)
	closedRevoked(t, again)
	if n := e.ep.Sessions(); n != 0 {
		t.Errorf("%d sessions after a revoked node's hello", n)
	}
}

// closedRevoked waits for conn to be closed and checks that the registry closed it with
// CloseRevoked.
func closedRevoked(t *testing.T, conn *quic.Conn) {
	t.Helper()
	select {
	case <-conn.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the session was not closed")
	}
	cause := context.Cause(conn.Context())
	ae, ok := errors.AsType[*quic.ApplicationError](cause)
	if !ok || !ae.Remote || proto.CloseCode(ae.ErrorCode) != proto.CloseRevoked {
		t.Fatalf("closed with %v, want CloseRevoked from the registry", cause)
	}
}

// TestEarlierCertificateProgressNotTold: a node agent runs a command relayed while its
// certificate was current, and the machine's epoch moves (a release) in a commit the
// endpoint has not heard of yet (another replica's, its watch behind). The progress the
// agent reports from then on is not told (OnProgress, which records it on the workflow's
// step), the session ends, and the command stays unanswered. Before, the progress
// reached OnProgress and the answer was stored.
func TestEarlierCertificateProgressNotTold(t *testing.T) {
	var mu sync.Mutex
	var progress []string
	told := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(progress)
	}
	var ticks atomic.Int64 // a second a reading: no report waits out the progress gap
	e := newEnv(t, agents.Config{OnProgress: func(node, id string, detail json.RawMessage) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, string(detail))
	}, Now: func() time.Time { return time.Unix(ticks.Add(1), 0) }})
	storetest.Fill(t, e.st)
	node := storetest.Node(t, e.st, store.Node{MACs: []string{"52:54:00:00:00:02"}}).ID
	moved := make(chan struct{})
	a := e.startAgent(node, func(c *session.Config) {
		c.Handlers = map[string]session.Handler{
			"work": func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
				session.ReportProgress(ctx, map[string]int{"done": 1})
				select {
				case <-moved:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				session.ReportProgress(ctx, map[string]int{"done": 2})
				return raw(`{"ok":true}`), nil
			},
		}
	})
	waitFor(t, "the session", func() bool { return e.ep.Sessions() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answered := make(chan error, 1)
	go func() {
		_, err := e.ep.Relay(ctx, node, proto.RoleNode, proto.Command{ID: "w-1", Kind: "work"})
		answered <- err
	}()
	waitFor(t, "the first progress", func() bool { return len(told()) == 1 })

	// The epoch moves in a commit whose hooks wait: the endpoint has not heard of it.
	committed, heard, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	unhook := e.st.OnWrite(func() { once.Do(func() { close(committed); <-heard }) }, store.BucketNodes)
	go func() {
		done <- e.st.Update(func(tx *store.Tx) error {
			_, err := tx.UpdateNode(node, func(n *store.Node) error { n.NewIdentityEpoch(tx.Now()); return nil })
			return err
		})
	}()
	<-committed
	unhook()
	close(moved)
	waitFor(t, "the session ended", func() bool { return e.ep.Sessions() == 0 && !a.Connected() })
	close(heard)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := told(); len(got) != 1 {
		t.Errorf("progress told %q, want only the report from before the move", got)
	}
	var c store.AgentCommand
	err := e.st.View(func(tx *store.Tx) (err error) { c, err = tx.AgentCommand(node, "w-1"); return err })
	if err != nil || c.Done {
		t.Errorf("the command after the session of the earlier installation: %+v, %v; want it pending", c, err)
	}
	select {
	case err := <-answered:
		t.Errorf("the relay returned %v, want it waiting for the current installation's agent", err)
	default:
	}
}

// TestAProgressFloodIsSpaced: the root user of a tenant's machine, holding its agent's
// key, answers a command of its own machine's run with 1,000 progress reports at once,
// and another with a report of 1 MiB. Each report told is a write of the run to the store
// every tenant shares: the registry tells the first report and no other within the
// progress gap (the clock here never moves), and none over 64 KiB. Before, it told all
// 1,000, and the 1 MiB one.
func TestAProgressFloodIsSpaced(t *testing.T) {
	var mu sync.Mutex
	var told []string
	e := newEnv(t, agents.Config{OnProgress: func(node, id string, detail json.RawMessage) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, id+" "+string(detail))
	}, Now: func() time.Time { return time.Unix(1e9, 0) }})
	storetest.Fill(t, e.st)
	node := storetest.Node(t, e.st, store.Node{MACs: []string{"52:54:00:00:00:03"}}).ID
	e.startAgent(node, func(c *session.Config) {
		c.Handlers = map[string]session.Handler{
			"flood": func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
				for i := range 1000 {
					session.ReportProgress(ctx, map[string]int{"done": i})
				}
				return raw(`{"ok":true}`), nil
			},
			"large": func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
				session.ReportProgress(ctx, map[string]string{"pad": strings.Repeat("x", 1<<20)})
				session.ReportProgress(ctx, map[string]int{"done": 1})
				return raw(`{"ok":true}`), nil
			},
		}
	})
	waitFor(t, "the session", func() bool { return e.ep.Sessions() == 1 })
	for _, kind := range []string{"flood", "large"} {
		if res, err := e.ep.Relay(context.Background(), node, proto.RoleNode, proto.Command{ID: kind + "-1", Kind: kind}); err != nil {
			t.Fatalf("%s: %+v, %v", kind, res, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{`flood-1 {"done":0}`, `large-1 {"done":1}`}; !slices.Equal(told, want) {
		if len(told) > 4 {
			told = append(told[:4], fmt.Sprintf("... %d in all", len(told)))
		}
		for i := range told {
			if len(told[i]) > 80 {
				told[i] = told[i][:80] + "..."
			}
		}
		t.Fatalf("progress told %q, want %q", told, want)
	}
}
