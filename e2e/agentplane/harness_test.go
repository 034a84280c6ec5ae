package agentplane

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
	"github.com/better-compute/better-compute/testkit"
	"github.com/quic-go/quic-go"
)

// env is a registry's agent endpoint on loopback over a store in a temporary directory,
// and the CA its agents' certificates come from.
type env struct {
	t      testing.TB
	ca     *testkit.CA
	server tls.Certificate
	dir    string
	addr   string
	hooks  agents.Config // the hooks (and AgentCAs, when set) of the next start
	// recordSessions records each agent's session in the store as the registry does
	// (workflow.JoinLog.Session, in the name of one run of the registry), after the hooks'
	// OnSession, and returns its error to the endpoint. Unless recordsMayFail (the test
	// makes the store fail), the first record that failed is kept in recordErr and
	// reported by stop, on the test's goroutine once the endpoint's have ended: a
	// goroutine of the endpoint may outlive the test, and failing it from there would
	// panic.
	recordSessions bool
	recordsMayFail bool
	recordErr      atomic.Pointer[error]
	// open opens the store of each start; a bbolt store in dir when nil.
	open func() (*store.Store, error)
	// log receives the endpoint's logs; testLog when nil.
	log *slog.Logger
	st  *store.Store
	ep  *agents.Endpoint
}

func newEnv(t testing.TB, hooks agents.Config) *env {
	t.Helper()
	ca, server := newCA(t)
	return startEnv(t, &env{t: t, ca: ca, server: server, dir: t.TempDir(), addr: "127.0.0.1:0", hooks: hooks})
}

// newCA is a new agent CA and a server certificate it issued.
func newCA(t testing.TB) (*testkit.CA, tls.Certificate) {
	t.Helper()
	ca, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.ServerCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return ca, server
}

// startEnv starts e, and stops it when the test ends.
func startEnv(t testing.TB, e *env) *env {
	t.Helper()
	e.start()
	t.Cleanup(func() {
		if e.ep != nil {
			e.stop()
		}
	})
	return e
}

// start opens the store and starts the endpoint on the address of the last one.
func (e *env) start() {
	e.t.Helper()
	open := e.open
	if open == nil {
		open = func() (*store.Store, error) { return store.Open(e.dir, store.Options{}) }
	}
	st, err := open()
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := e.hooks
	cfg.Listen, cfg.Certificate, cfg.Store, cfg.Log = e.addr, e.server, st, e.log
	if cfg.Log == nil {
		cfg.Log = testLog(e.t)
	}
	if e.recordSessions {
		joins, hook := workflow.NewJoinLog(st, store.Holder{Replica: "rg_bench", Started: time.Now()}), cfg.OnSession
		cfg.OnSession = func(node string, role proto.Role, opened time.Time, bootID string) error {
			if hook != nil {
				if err := hook(node, role, opened, bootID); err != nil {
					return err
				}
			}
			err := joins.Session(node, string(role), opened, bootID)
			if err != nil && !e.recordsMayFail {
				err := fmt.Errorf("recording the session of %s: %w", node, err)
				e.recordErr.CompareAndSwap(nil, &err)
			}
			return err
		}
	}
	if cfg.AgentCAs == nil {
		cfg.AgentCAs = e.ca.Pool()
	}
	ep, err := agents.Start(cfg)
	if err != nil {
		st.Close()
		e.t.Fatal(err)
	}
	e.st, e.ep, e.addr = st, ep, ep.Addr().String()
}

// stop closes the endpoint and the store, as a registry that stops does.
func (e *env) stop() {
	e.t.Helper()
	if err := e.ep.Close(); err != nil {
		e.t.Errorf("close endpoint: %v", err)
	}
	if err := e.recordErr.Swap(nil); err != nil { // Close waited for the endpoint's goroutines
		e.t.Error(*err)
	}
	e.st.Close()
	e.ep, e.st = nil, nil
}

// setSpec stores a NodeSpec for node with the given labels and returns its generation.
func (e *env) setSpec(node string, labels map[string]string) int64 {
	e.t.Helper()
	var spec proto.NodeSpec
	err := e.st.Update(func(tx *store.Tx) (err error) {
		spec, err = tx.SetNodeSpec(proto.NodeSpec{Node: node, Role: proto.RoleNode, Labels: labels})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return spec.Generation
}

// status is node's agent status, the zero value when none is stored.
func (e *env) status(node string) store.AgentStatus {
	var st store.AgentStatus
	e.st.View(func(tx *store.Tx) error { st, _ = tx.AgentStatus(node); return nil })
	return st
}

// agent is an agent session running on its own goroutine.
type agent struct {
	*session.Agent
	mu      sync.Mutex
	applied []proto.NodeSpec
}

func (a *agent) lastApplied() proto.NodeSpec {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.applied) == 0 {
		return proto.NodeSpec{}
	}
	return a.applied[len(a.applied)-1]
}

// startAgent runs an agent of node (role node) against the endpoint until the test
// ends. edit adjusts its config: the address, handlers, apply.
func (e *env) startAgent(node string, edit func(*session.Config)) *agent {
	e.t.Helper()
	a, stop := e.runAgent(node, edit)
	e.t.Cleanup(stop)
	return a
}

// runAgent runs an agent as startAgent does, until stop (which waits for it to end).
func (e *env) runAgent(node string, edit func(*session.Config)) (a *agent, stop func()) {
	e.t.Helper()
	cert, err := e.ca.AgentCertificate(node, string(proto.RoleNode))
	if err != nil {
		e.t.Fatal(err)
	}
	a = &agent{}
	cfg := session.Config{
		Addr:        e.addr,
		Certificate: cert,
		ServerCAs:   e.ca.Pool(),
		Log:         testLog(e.t),
		Backoff:     session.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		KeepAlive:   100 * time.Millisecond,
		Apply: func(ctx context.Context, spec proto.NodeSpec) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.applied = append(a.applied, spec)
			return nil
		},
	}
	if edit != nil {
		edit(&cfg)
	}
	if a.Agent, err = session.New(cfg); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	return a, func() { cancel(); <-done }
}

// waitFor polls cond until it holds, failing the test after 20 s (waitUntil).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitUntil(t, what, 20*time.Second, 5*time.Millisecond, cond)
}

// dialRefused dials addr over QUIC with conf and returns why the agent endpoint refused
// the connection, or nil when it kept it. TLS 1.3 lets the client finish before the
// server has checked its certificate: a refusal then closes the connection right after.
func dialRefused(addr string, conf *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, conf, nil)
	if err != nil {
		return err
	}
	defer conn.CloseWithError(0, "")
	select {
	case <-conn.Context().Done():
		return context.Cause(conn.Context())
	case <-time.After(3 * time.Second): // a refusal comes at once; a loaded machine may take a while
		return nil
	}
}

// testLog logs at debug level to stderr when BC_TEST_LOG is set, else nowhere: a test at
// debug level (its debug records are formatted, then dropped), a benchmark at the level
// `better-compute serve` logs at (info), so that it measures what the registry does,
// not the formatting of records the registry does not make.
func testLog(t testing.TB) *slog.Logger {
	if os.Getenv("BC_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	level := slog.LevelDebug
	if _, bench := t.(*testing.B); bench {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: level}))
}

// raw is a JSON literal.
func raw(s string) json.RawMessage { return json.RawMessage(s) }
