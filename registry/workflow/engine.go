package workflow

import (
	"context"
	"encoding/json"
	"errors"
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
	// Claims, if set, makes the engine drive a run only while it holds the run's claim
	// in the store (store.Tx.ClaimRun): of the registries sharing one store exactly one
	// drives each run, and another takes a run over once the claim of the one that
	// drove it expires. Without it the engine drives every running run of its store.
	Claims *Claims
}

// Claims is what an engine claims the runs it drives as.
type Claims struct {
	// Owner names this registry among those sharing its store; a restarted registry
	// that keeps its name takes its runs back at once.
	Owner string
	// Started is when this run of the registry started (store.Holder.Started), when the
	// engine was made (New) if zero: of two runs of one Owner up at once, the later
	// drives the runs, and the earlier's writes of them are refused.
	Started time.Time
	// TTL is how long a claim holds unrenewed: how long the runs of a registry that died
	// wait for another (DefaultClaimTTL when zero). The engine renews its claims every
	// third of it, and in every transaction that drives a run.
	TTL time.Duration
}

// DefaultClaimTTL is Claims.TTL's default.
const DefaultClaimTTL = 30 * time.Second

// errClaimLost stops driving a run whose claim another registry holds now.
var errClaimLost = errors.New("another registry drives the workflow now")

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

// EndCheck is asked, in the transaction that ends a run whose steps succeeded, before the
// run is recorded, whether its end fails it still (a deploy whose profile names a secret
// reference its node's tenant may no longer be handed): the failure it returns, if any,
// is the run's, so that the run, recorded failed, and its node (its FinishFunc is told
// of a failed run) agree.
type EndCheck func(tx *store.Tx, run store.Run) (*store.StepFailure, error)

// Engine runs workflows.
type Engine struct {
	cfg      Config
	handlers map[string]Handler
	finish   map[string]FinishFunc
	checks   map[string]EndCheck
	guards   []RelayGuard

	mu  sync.Mutex
	ctx context.Context
	// running stops each run this engine drives, with errClaimLost when its claim is
	// lost.
	running map[string]context.CancelCauseFunc
	// plans are what the runs this engine drives run, read once as each drive starts: a
	// run's plan never changes, and watchers of the run read it here rather than define
	// its document (up to 1 MiB) again at every change.
	plans map[string]plan
	// renders keeps the latest renderings of stored versions that runs refer to, so
	// that reading a run this engine does not drive (an ended one) renders its
	// profile once, not at every read.
	renders *renderings
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
	if cfg.Claims != nil {
		claims := *cfg.Claims
		if claims.TTL == 0 {
			claims.TTL = DefaultClaimTTL
		}
		if claims.Started.IsZero() {
			claims.Started = cfg.Clock.Now()
		}
		cfg.Claims = &claims
	}
	e := &Engine{cfg: cfg, handlers: map[string]Handler{}, finish: map[string]FinishFunc{}, checks: map[string]EndCheck{},
		running: map[string]context.CancelCauseFunc{}, plans: map[string]plan{}, renders: newRenderings(keptRenderings), aborts: map[string]context.CancelCauseFunc{}, changed: make(chan struct{})}
	// Every commit that writes a run, this registry's or (on etcd) another's, wakes
	// its watchers.
	cfg.Store.OnWrite(e.notify, store.BucketRuns)
	return e
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

// CheckEnd registers what checks the end of a run of kind whose steps succeeded.
func (e *Engine) CheckEnd(kind string, fn EndCheck) { e.checks[kind] = fn }

// NewRun is a run to create.
type NewRun struct {
	// Kind is a kind registered with OnFinish.
	Kind   string
	Node   string
	Tenant string
	// Profile names the version the run runs, and Define is its profile: a stored
	// version's document defined, or a shipped profile (its tenant profile.ShippedTenant),
	// changed or not.
	Profile store.ProfileRef
	Define  *profile.Profile
	// IdentityEpoch is the node's identity epoch the run runs at (store.Run's).
	IdentityEpoch int64
	// EndBytes is what the run's end (its kind's FinishFunc) writes beside the run's
	// record that the kind alone knows of (store.Run's): the run keeps that much less.
	EndBytes int
}

// Create stores a run of a profile's rendered steps in tx. A run of a stored version
// marks it used (immutable from now on) in the same transaction and refers to it; a run
// of a shipped profile keeps its document. Start it once tx has committed.
func (e *Engine) Create(tx *store.Tx, req NewRun) (store.Run, error) {
	if _, ok := e.finish[req.Kind]; !ok {
		return store.Run{}, proto.Errorf(proto.Internal, "no workflow kind %q", req.Kind)
	}
	boot, err := machineBoot(tx, req.Node)
	if err != nil {
		return store.Run{}, err
	}
	run := store.Run{Kind: req.Kind, Node: req.Node, Tenant: req.Tenant, Profile: req.Profile, BootID: boot, IdentityEpoch: &req.IdentityEpoch, EndBytes: req.EndBytes}
	for _, s := range profile.Render(req.Define) {
		run.Steps = append(run.Steps, store.RunStep{Phase: s.Phase, Index: s.Index, Use: s.Use, On: s.On})
	}
	if req.Profile.Tenant == profile.ShippedTenant {
		run.Document = req.Define.Document()
	} else if err := tx.MarkProfileUsed(req.Profile.Tenant, req.Profile.ID, req.Profile.Version); err != nil {
		return store.Run{}, err
	}
	run, err = tx.CreateRun(run)
	if err != nil {
		return run, err
	}
	_, err = tx.AppendEvent(store.Event{Node: run.Node, Tenant: run.Tenant, Kind: store.EventWorkflowStarted, Workflow: run.ID,
		Detail: fmt.Sprintf("%s: %s/%s@%d", run.Kind, run.Profile.Tenant, run.Profile.ID, run.Profile.Version)})
	return run, err
}

// Resume starts every running run of the store, and makes ctx the context of every run
// started from now on: when it ends, runs stop where they are, to be resumed by the
// next Resume. With Claims it also renews the engine's claims, and starts the runs whose
// claim another registry let expire, every third of the claims' TTL until ctx ends.
func (e *Engine) Resume(ctx context.Context) error {
	e.mu.Lock()
	e.ctx = ctx
	e.mu.Unlock()
	if err := e.startAll(); err != nil {
		return err
	}
	if e.cfg.Claims != nil {
		e.wg.Go(func() { e.keepClaims(ctx) })
	}
	return nil
}

// startAll starts every running run of the store that this engine does not drive yet.
func (e *Engine) startAll() error {
	var ids []string
	if err := e.cfg.Store.View(func(tx *store.Tx) (err error) { ids, err = tx.RunningRuns(); return err }); err != nil {
		return err
	}
	for _, id := range ids {
		e.Start(id)
	}
	return nil
}

// Start runs a stored run in the background, unless it runs already, or (with Claims)
// another registry holds its claim. It does nothing before Resume.
func (e *Engine) Start(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx == nil || e.running[id] != nil {
		return
	}
	ctx, stop := context.WithCancelCause(e.ctx)
	e.running[id] = stop
	e.wg.Go(func() {
		if e.claim(id) {
			e.driveOut(ctx, id)
		}
		e.mu.Lock()
		delete(e.running, id)
		delete(e.plans, id)
		e.mu.Unlock()
		stop(nil)
		e.release(id)
	})
}

// Wait returns once every run started has stopped: finished, or stopped by the end of
// the context given to Resume.
func (e *Engine) Wait() { e.wg.Wait() }

// plan is what a run runs: its steps rendered, in the run's order, and its profile,
// defined again from the run's document.
type plan struct {
	steps []profile.RenderedStep
	// profile is nil when the document no longer defines (the checks grew stricter
	// since), and undefined says so: only a run that froze its steps runs on then.
	profile   *profile.Profile
	undefined error
	// specs are steps as workflows.get shows them (each RenderedStep's JSON), when
	// the steps are its document's rendering; nil for steps a run froze.
	specs []json.RawMessage
}

// errNoPlan is what a run cannot run without: steps, which its document (no longer
// defining, or rendering other steps than the run was created with) does not give.
var errNoPlan = errors.New("the workflow's steps cannot be rendered from its profile")

// planOf reads in tx what run runs: the steps as a run stored before froze them (their
// Spec), else the steps of its document rendered again, which must be the steps (phase,
// index, use and where each runs) it was created with (else errNoPlan). The rendering
// of a stored version comes from renders when it is there, and goes there once made.
func planOf(tx *store.Tx, run store.Run, renders *renderings) (plan, error) {
	r, err := renders.of(tx, run)
	if err != nil {
		return plan{}, err
	}
	pl := plan{profile: r.profile, specs: r.specs}
	if r.derr != nil {
		pl.undefined = proto.Errorf(proto.Internal, "workflow %s: its profile document no longer defines: %w", run.ID, r.derr)
	}
	if len(run.Steps) > 0 && len(run.Steps[0].Spec) > 0 {
		pl.specs = nil
		for _, s := range run.Steps {
			spec, err := specOf(s)
			if err != nil {
				return plan{}, err
			}
			pl.steps = append(pl.steps, spec)
		}
		return pl, nil
	}
	if r.derr != nil {
		return plan{}, proto.Errorf(proto.Internal, "workflow %s: %w: its profile document no longer defines: %v", run.ID, errNoPlan, r.derr)
	}
	pl.steps = r.steps
	if len(pl.steps) != len(run.Steps) {
		return plan{}, proto.Errorf(proto.Internal, "workflow %s: %w: it renders %d steps, not the %d it started with", run.ID, errNoPlan, len(pl.steps), len(run.Steps))
	}
	for i, s := range pl.steps {
		if was := run.Steps[i]; s.Phase != was.Phase || s.Index != was.Index || s.Use != was.Use || s.On != was.On {
			return plan{}, proto.Errorf(proto.Internal, "workflow %s: %w: it renders %s as %s on %s, not as the %s on %s it started with", run.ID, errNoPlan, was.Path(), s.Use, s.On, was.Use, was.On)
		}
	}
	return pl, nil
}

// plan returns what run runs: the plan of a run this engine drives, else read.
func (e *Engine) plan(run store.Run) (pl plan, err error) {
	e.mu.Lock()
	pl, ok := e.plans[run.ID]
	e.mu.Unlock()
	if ok {
		return pl, nil
	}
	err = e.cfg.Store.View(func(tx *store.Tx) (err error) { pl, err = planOf(tx, run, e.renders); return err })
	return pl, err
}

// drives reads the plan of run id as its drive starts, and keeps it until the drive ends.
func (e *Engine) drives(id string) (plan, error) {
	run, err := e.load(id)
	if err != nil {
		return plan{}, err
	}
	pl, err := e.plan(run)
	if err == nil {
		e.mu.Lock()
		e.plans[id] = pl
		e.mu.Unlock()
	}
	return pl, err
}
