package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// backoff is the tests' retry backoff: n minutes after the n-th failed try.
func backoff(n int) time.Duration { return time.Duration(n) * time.Minute }

// harness is one registry's worth of workflow engine over a real store in a directory
// that outlives it, with a fake agent at the relay edge that outlives it too.
type harness struct {
	t      *testing.T
	clock  *clock.Fake
	agent  *fakeAgent
	store  *store.Store
	joins  *JoinLog
	engine *Engine
	cancel context.CancelFunc
	node   string
	// handlers are registered with every engine the harness starts (Engine.Handle).
	handlers map[string]Handler
	// openStore opens the store, each time the registry starts.
	openStore func(store.Options) (*store.Store, error)
	// finished counts the finish hook's calls by run id; onFinish, when set, is what the
	// hook does then.
	mu       sync.Mutex
	finished map[string]int
	onFinish func(tx *store.Tx, run store.Run) error
	// endBytes is the NewRun.EndBytes of the runs start starts: the less their records
	// keep.
	endBytes int
	// observer is the Observer of every engine the harness starts; none when nil.
	observer Observer
}

func newHarness(t *testing.T, labels map[string]string) *harness {
	t.Helper()
	dir := t.TempDir()
	return newHarnessOn(t, labels, func(opts store.Options) (*store.Store, error) { return store.Open(dir, opts) })
}

// newHarnessOn is newHarness over the store open opens.
func newHarnessOn(t *testing.T, labels map[string]string, open func(store.Options) (*store.Store, error)) *harness {
	t.Helper()
	h := &harness{t: t, clock: clock.NewFake(epoch), agent: newFakeAgent(), openStore: open, finished: map[string]int{}}
	h.open()
	storetest.Fill(t, h.store)
	h.node = storetest.Node(t, h.store, store.Node{MACs: []string{"52:54:00:00:00:01"}, Labels: labels}).ID
	t.Cleanup(h.stop)
	return h
}

// open opens the store and starts an engine over it, as a registry start does.
func (h *harness) open() {
	h.t.Helper()
	st, err := h.openStore(store.Options{Now: h.clock.Now})
	if err != nil {
		h.t.Fatal(err)
	}
	h.store, h.joins = st, NewJoinLog(st, store.Holder{})
	h.engine = New(Config{Store: st, Clock: h.clock, Relay: h.agent, Joins: h.joins, Backoff: backoff, Observer: h.observer})
	for use, fn := range h.handlers {
		h.engine.Handle(use, fn)
	}
	h.engine.OnFinish("test", func(tx *store.Tx, run store.Run) error {
		h.mu.Lock()
		h.finished[run.ID]++
		fn := h.onFinish
		h.mu.Unlock()
		if fn != nil {
			return fn(tx, run)
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.agent.setStop(cancel)
	if err := h.engine.Resume(ctx); err != nil {
		h.t.Fatal(err)
	}
}

// stop stops the engine and closes the store, as a registry that dies does: runs stay
// as stored.
func (h *harness) stop() {
	if h.store == nil {
		return
	}
	h.cancel()
	h.engine.Wait()
	h.store.Close()
	h.store = nil
}

// restart stops the registry and starts it again over the same store.
func (h *harness) restart() {
	h.stop()
	h.open()
}

// start stores doc as acme's profile and starts a run of it for the node.
func (h *harness) start(doc string) string {
	h.t.Helper()
	p, err := profile.Define([]byte(doc))
	if err != nil {
		h.t.Fatal(err)
	}
	var run store.Run
	err = h.store.Update(func(tx *store.Tx) error {
		if _, err := tx.CreateProfile(store.ProfileRecord{Tenant: "acme", ID: p.ID(), Version: p.Version(), Document: p.Document()}); err != nil {
			return err
		}
		run, err = h.engine.Create(tx, NewRun{Kind: "test", Node: h.node, Tenant: "acme",
			Profile: store.ProfileRef{Tenant: "acme", ID: p.ID(), Version: p.Version()}, Define: p, EndBytes: h.endBytes})
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.engine.Start(run.ID)
	return run.ID
}

// waitFor returns the run once cond holds for it, failing the test after 10 seconds.
func (h *harness) waitFor(id string, cond func(store.Run) bool) store.Run {
	h.t.Helper()
	// A bound on a hang, not on speed: a run of 1 MiB records on etcd under the race
	// detector, beside other work, took more than 10 s.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rev := 0
	for {
		run, err := h.engine.Watch(ctx, id, rev)
		if err != nil {
			h.t.Fatal(err)
		}
		if cond(run) {
			return run
		}
		if ctx.Err() != nil {
			h.t.Fatalf("waiting for workflow %s: gave up at %s", id, summary(run))
		}
		rev = run.Rev
	}
}

func (h *harness) waitEnd(id string) store.Run {
	h.t.Helper()
	return h.waitFor(id, func(r store.Run) bool { return r.State != store.RunRunning })
}

// attemptsDone waits until step i of the run has n finished attempts.
func (h *harness) attemptsDone(id string, i, n int) store.Run {
	h.t.Helper()
	return h.waitFor(id, func(r store.Run) bool {
		done := r.Steps[i].AttemptsDropped
		for _, a := range r.Steps[i].Attempts {
			if !a.FinishedAt.IsZero() {
				done++
			}
		}
		return done >= n
	})
}

// backOff waits until step 0 of run id has finished tries attempts, then moves the clock
// by the backoff after the n-th failed try, once the engine waits on it.
func (h *harness) backOff(id string, tries, n int) {
	h.t.Helper()
	h.attemptsDone(id, 0, tries)
	h.clock.BlockUntil(1)
	h.clock.Advance(backoff(n))
}

// summary writes a run as one line per step: path, use, state, attempts and error
// code, the way the table tests compare it.
func summary(r store.Run) string {
	s := r.State
	if r.Failure != nil {
		s += " at " + r.Failure.Step + " " + string(r.Failure.Error.Code)
	}
	for _, st := range r.Steps {
		s += fmt.Sprintf("\n%s %s %s", st.Path(), st.Use, st.State)
		if len(st.Attempts) > 0 {
			s += fmt.Sprintf(" tries=%d", len(st.Attempts)+st.AttemptsDropped)
		}
		if st.ViaFallback {
			s += " via-fallback"
		}
		if st.Error != nil {
			s += " " + string(st.Error.Code)
		}
	}
	return s
}

// outcome is what the fake agent does with a new command.
type outcome struct {
	fail bool
	// message, when set, is what a failure says.
	message string
	// hold keeps the command running until the test releases it.
	hold bool
	// result, when set, is the answer of a command that succeeds.
	result json.RawMessage
	// answerAtEnd keeps the command running until its relay's context ends, when the
	// agent answers it: its answer is recorded before the withdrawal, and the relay
	// returns it, as the registry's relay returns the answer the store recorded first.
	answerAtEnd bool
}

var (
	ok   = outcome{}
	fail = outcome{fail: true}
	hold = outcome{hold: true}
)

// fakeAgent stands for every agent: it runs each command id once, keeps its answer and
// returns the kept answer when the same id comes again, as agents do.
type fakeAgent struct {
	mu sync.Mutex
	// script gives the outcomes of a kind's commands in the order they arrive; the
	// last repeats. A kind not in it succeeds.
	script map[string][]outcome
	runs   map[string]*execution
	// order lists command ids in the order they first arrived.
	order []string
	sends map[string]int
	// crashOn stops the registry when the command arrives: before it reaches the agent
	// ("before"), or once the agent is running it ("running").
	crashOn map[string]string
	stopFn  context.CancelFunc
	crashed bool
	inputs  map[string]json.RawMessage
	// stored is what each command was first relayed with (Stored).
	stored  map[string]CommandInput
	targets map[string]RelayTarget
	kinds   map[string]string
	// causes are why each command's relay context ended before its answer
	// (context.Cause).
	causes map[string]error
	// recorded are the attempts the engine said it recorded (Recorded), in order, and
	// spent the answered commands they spent, with their attempt: a relay of one, or a
	// read of what it was stored with, is INVALID_STATE, as the registry's relay has it.
	recorded []string
	spent    map[string]string
}

type execution struct {
	done   chan struct{}
	result json.RawMessage
	err    error
	// answerAtEnd: see outcome.
	answerAtEnd bool
}

func newFakeAgent() *fakeAgent {
	return &fakeAgent{script: map[string][]outcome{}, runs: map[string]*execution{}, sends: map[string]int{},
		crashOn: map[string]string{}, inputs: map[string]json.RawMessage{}, stored: map[string]CommandInput{}, targets: map[string]RelayTarget{}, kinds: map[string]string{},
		causes: map[string]error{}, spent: map[string]string{}}
}

func (a *fakeAgent) setStop(fn context.CancelFunc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopFn = fn
}

func (a *fakeAgent) Relay(ctx context.Context, target RelayTarget, id, kind string, in CommandInput) (json.RawMessage, error) {
	input := in.Payload
	a.mu.Lock()
	a.sends[id]++
	if attempt, ok := a.spent[id]; ok {
		a.mu.Unlock()
		return nil, proto.Errorf(proto.InvalidState, "command %s was recorded with attempt %s: a step relayed it again", id, attempt)
	}
	// The relay stores a command before anything is sent (a crash before the agent has
	// it leaves it stored), and a pending one asked for with another input is CONFLICT.
	if prev, ok := a.stored[id]; !ok {
		a.stored[id] = in
	} else if !a.answered(id) && (!bytes.Equal(prev.Payload, in.Payload) || !bytes.Equal(prev.Kept, in.Kept)) {
		a.mu.Unlock()
		return nil, proto.Errorf(proto.Conflict, "command %s is pending with another input", id)
	}
	crash := a.crashOn[id]
	delete(a.crashOn, id)
	if crash == "before" {
		a.stopFn()
		a.crashed = true
		a.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	ex := a.runs[id]
	if ex == nil && ctx.Err() != nil {
		// A relay whose caller gave the command up already sends nothing.
		a.causes[id] = context.Cause(ctx)
		a.mu.Unlock()
		return nil, ctx.Err()
	}
	if ex == nil {
		ex = &execution{done: make(chan struct{})}
		a.runs[id] = ex
		a.order = append(a.order, id)
		a.inputs[id], a.targets[id], a.kinds[id] = input, target, kind
		n := 0
		for _, other := range a.order {
			if a.kinds[other] == kind {
				n++
			}
		}
		o := ok
		if s := a.script[kind]; len(s) > 0 {
			o = s[min(n, len(s))-1]
		}
		switch {
		case o.hold:
		case o.answerAtEnd:
			ex.answerAtEnd = true
		case o.fail:
			ex.err = proto.Errorf(proto.DriverError, "%s failed", kind)
			if o.message != "" {
				ex.err = &proto.Error{Code: proto.DriverError, Message: o.message}
			}
			close(ex.done)
		default:
			ex.result = o.result
			if ex.result == nil {
				ex.result = json.RawMessage(`{"kind":"` + kind + `"}`)
			}
			close(ex.done)
		}
	}
	if crash == "running" {
		// The agent runs the command; its answer is lost with the registry.
		a.stopFn()
		a.crashed = true
		a.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	a.mu.Unlock()
	// An answer recorded before the caller gave the command up wins.
	select {
	case <-ex.done:
		return ex.result, ex.err
	default:
	}
	select {
	case <-ex.done:
		return ex.result, ex.err
	case <-ctx.Done():
		a.mu.Lock()
		defer a.mu.Unlock()
		a.causes[id] = context.Cause(ctx)
		if ex.answerAtEnd && !a.answered(id) {
			ex.result = json.RawMessage(`{"answeredAtEnd":true}`)
			close(ex.done)
			return ex.result, nil
		}
		return nil, ctx.Err()
	}
}

// answered says whether the agent answered command id, with a.mu held.
func (a *fakeAgent) answered(id string) bool {
	ex := a.runs[id]
	if ex == nil {
		return false
	}
	select {
	case <-ex.done:
		return true
	default:
		return false
	}
}

func (a *fakeAgent) Stored(_ context.Context, _ RelayTarget, id string) (CommandInput, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if attempt, ok := a.spent[id]; ok {
		return CommandInput{}, false, proto.Errorf(proto.InvalidState, "command %s was recorded with attempt %s: a step read it again", id, attempt)
	}
	in, ok := a.stored[id]
	return in, ok, nil
}

// Recorded spends the answered commands of attempt, as the registry's relay does: those
// the agent ran, and those a test stored for the node's agents in the store.
func (a *fakeAgent) Recorded(tx *store.Tx, node store.Node, attempt, run, step string) error {
	a.mu.Lock()
	a.recorded = append(a.recorded, attempt)
	for id := range a.runs {
		if (id == attempt || strings.HasPrefix(id, attempt+":")) && a.answered(id) {
			a.spent[id] = attempt
		}
	}
	a.mu.Unlock()
	for _, agent := range a.Agents(node) {
		if _, err := tx.RecordAgentCommands(agent, attempt, run, step); err != nil {
			return err
		}
	}
	return nil
}

// Agents are the node's own agent and its site's, whose id is the site's, as the
// registry's relay has them.
func (a *fakeAgent) Agents(node store.Node) []string {
	if node.Site == "" {
		return []string{node.ID}
	}
	return []string{node.ID, node.Site}
}

// recordedAttempts are the attempts the engine said it recorded, in order.
func (a *fakeAgent) recordedAttempts() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.recorded)
}

// cause is why the relay context of command id ended, nil while it runs.
func (a *fakeAgent) cause(id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.causes[id]
}

// input is the input command id came with.
func (a *fakeAgent) input(id string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return string(a.inputs[id])
}

// release finishes a held command successfully.
func (a *fakeAgent) release(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ex := a.runs[id]
	ex.result = json.RawMessage(`{"released":true}`)
	close(ex.done)
}

// waitRunning waits until the agent runs the command id.
func (a *fakeAgent) waitRunning(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		a.mu.Lock()
		_, running := a.runs[id]
		a.mu.Unlock()
		if running {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("command %s never reached the agent; it ran %v", id, a.executed())
}

// executed returns the command ids the agent ran, in order.
func (a *fakeAgent) executed() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.order)
}

// sent returns how often each command id was sent.
func (a *fakeAgent) sent() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]int{}
	for id, n := range a.sends {
		out[id] = n
	}
	return out
}

// takeCrash reports whether the agent stopped the registry since it was last asked.
func (a *fakeAgent) takeCrash() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.crashed
	a.crashed = false
	return c
}

// finishedCount is how often the finish hook was told of run id's end.
func (h *harness) finishedCount(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.finished[id]
}
