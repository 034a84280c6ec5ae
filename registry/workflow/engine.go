package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// Config is what an engine runs with.
type Config struct {
	Store *store.Store
	// Clock times attempts and backoff; clock.Real when nil.
	Clock clock.Clock
	// Relay delivers relayed steps; without one they fail with UNSUPPORTED.
	Relay Relay
	// Joins tells of agents joining, for await: rejoin; without it such steps fail
	// with UNSUPPORTED.
	Joins Joins
	// Backoff is the wait before the next try after the n-th failed try of a step or
	// its fallback; DefaultBackoff when nil.
	Backoff func(n int) time.Duration
	// Observer is told of the steps and runs that end; none when nil.
	Observer Observer
	Log      *slog.Logger
}

// DefaultBackoff waits 10 seconds after a first failed try and doubles each time, up to
// 5 minutes.
func DefaultBackoff(n int) time.Duration {
	d := 10 * time.Second
	for i := 1; i < n && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// FinishFunc is told of a run's end in the transaction that records it, so what the end
// means for the node (active, failed) commits with it or not at all.
type FinishFunc func(tx *store.Tx, run store.Run) error

// Engine runs workflows.
type Engine struct {
	cfg      Config
	handlers map[string]Handler
	finish   map[string]FinishFunc
	guards   []RelayGuard

	mu      sync.Mutex
	ctx     context.Context
	running map[string]bool
	// aborts abandon the main or acceptance step each run is on, for Cancel.
	aborts  map[string]context.CancelCauseFunc
	changed chan struct{}
	wg      sync.WaitGroup
}

// New returns an engine with no handlers. Register them, then call Resume.
func New(cfg Config) *Engine {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Backoff == nil {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Engine{cfg: cfg, handlers: map[string]Handler{}, finish: map[string]FinishFunc{},
		running: map[string]bool{}, aborts: map[string]context.CancelCauseFunc{}, changed: make(chan struct{})}
}

// Handle registers the handler of a step. A control-plane step needs one; a relayed step
// without one is relayed as it is (its use is the command's kind, its with the input).
func (e *Engine) Handle(step string, h Handler) { e.handlers[step] = h }

// RelayGuard decides, before an attempt relays a command to its node's agent of role,
// whether the command may go: an error fails the relay at once, and the command is
// neither stored nor sent.
type RelayGuard func(ctx context.Context, a *Attempt, role string) error

// GuardRelays registers a guard every relay of an attempt passes first.
func (e *Engine) GuardRelays(g RelayGuard) { e.guards = append(e.guards, g) }

// OnFinish registers what the end of a run of kind does.
func (e *Engine) OnFinish(kind string, fn FinishFunc) { e.finish[kind] = fn }

// NewRun is a run to create.
type NewRun struct {
	// Kind is a kind registered with OnFinish.
	Kind    string
	Node    string
	Tenant  string
	Profile store.ProfileRef
	Define  *profile.Profile
}

// Create stores a run of a profile's rendered steps in tx, and marks a stored profile
// version used (immutable from now on) in the same transaction. Start it once tx has
// committed.
func (e *Engine) Create(tx *store.Tx, req NewRun) (store.Run, error) {
	if _, ok := e.finish[req.Kind]; !ok {
		return store.Run{}, proto.Errorf(proto.Internal, "no workflow kind %q", req.Kind)
	}
	run := store.Run{Kind: req.Kind, Node: req.Node, Tenant: req.Tenant, Profile: req.Profile, Document: req.Define.Document()}
	for _, s := range profile.Render(req.Define) {
		spec, err := json.Marshal(s)
		if err != nil {
			return store.Run{}, err
		}
		run.Steps = append(run.Steps, store.RunStep{Phase: s.Phase, Index: s.Index, Use: s.Use, On: s.On, Spec: spec})
	}
	if req.Profile.Tenant != profile.ShippedTenant {
		if err := tx.MarkProfileUsed(req.Profile.Tenant, req.Profile.ID, req.Profile.Version); err != nil {
			return store.Run{}, err
		}
	}
	run, err := tx.CreateRun(run)
	if err != nil {
		return run, err
	}
	_, err = tx.AppendEvent(store.Event{Node: run.Node, Tenant: run.Tenant, Kind: store.EventWorkflowStarted, Workflow: run.ID,
		Detail: fmt.Sprintf("%s: %s/%s@%d", run.Kind, run.Profile.Tenant, run.Profile.ID, run.Profile.Version)})
	return run, err
}

// Resume starts every running run of the store, and makes ctx the context of every run
// started from now on: when it ends, runs stop where they are, to be resumed by the
// next Resume.
func (e *Engine) Resume(ctx context.Context) error {
	e.mu.Lock()
	e.ctx = ctx
	e.mu.Unlock()
	var ids []string
	if err := e.cfg.Store.View(func(tx *store.Tx) (err error) { ids, err = tx.RunningRuns(); return err }); err != nil {
		return err
	}
	for _, id := range ids {
		e.Start(id)
	}
	return nil
}

// Start runs a stored run in the background, unless it runs already. It does nothing
// before Resume.
func (e *Engine) Start(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx == nil || e.running[id] {
		return
	}
	e.running[id] = true
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := e.drive(e.ctx, id); err != nil && e.ctx.Err() == nil {
			e.cfg.Log.Error("workflow stopped", "workflow", id, "err", err)
		}
		e.mu.Lock()
		delete(e.running, id)
		e.mu.Unlock()
	}()
}

// Wait returns once every run started has stopped: finished, or stopped by the end of
// the context given to Resume.
func (e *Engine) Wait() { e.wg.Wait() }

// runProfile defines the profile a run was started with again.
func runProfile(r store.Run) (*profile.Profile, error) {
	p, err := profile.Define(r.Document)
	if err != nil {
		return nil, proto.Errorf(proto.Internal, "workflow %s: its profile document no longer defines: %w", r.ID, err)
	}
	return p, nil
}
