package metal

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// pausedRelay is the relay of a registry that pauses as the answer of the first command
// it relays reaches it: the answer waits until resume is closed.
type pausedRelay struct {
	inner    workflow.Relay
	answered chan struct{}
	resume   chan struct{}
}

func (p *pausedRelay) Relay(ctx context.Context, target workflow.RelayTarget, id, kind string, in workflow.CommandInput) (json.RawMessage, error) {
	out, err := p.inner.Relay(ctx, target, id, kind, in)
	close(p.answered)
	<-p.resume
	return out, err
}

func (p *pausedRelay) Stored(ctx context.Context, target workflow.RelayTarget, id string) (workflow.CommandInput, bool, error) {
	return p.inner.Stored(ctx, target, id)
}

func (p *pausedRelay) Recorded(tx *store.Tx, node store.Node, attempt, run, step string) error {
	return p.inner.Recorded(tx, node, attempt, run, step)
}

func (p *pausedRelay) Agents(node store.Node) []string { return p.inner.Agents(node) }

// TestAStepOfARunTakenOverWritesNothing: a registry that paused as a power action's
// answer reached it, past its claim's expiry, while another replica took the run over
// and ended it, writes nothing of the step once it resumes: the moment the machine
// stopped stays the one the registry that drove the run recorded. Before, the paused
// registry's power.setPower recorded the moment it resumed, long after the machine
// stopped, so that a ramdisk that joined in between counted as booted before the power
// action (metal.ensureRamdisk then boots the machine again).
func TestAStepOfARunTakenOverWritesNothing(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	h.setPolicy(store.PoolPolicy{Agent: store.AgentNone}) // commissioning only powers it off
	h.machine.forget()
	// The harness's registry stops; two replicas over the same store take its place.
	h.shutdown()
	st, err := h.open(store.Options{Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	h.store, h.shutdown = st, func() { st.Close() }
	joins := workflow.NewJoinLog(st, store.Holder{})
	replica := func(owner string, clk clock.Clock, relay workflow.Relay) (*Service, *workflow.Engine, func()) {
		engine := workflow.New(workflow.Config{Store: st, Clock: clk, Relay: relay, Joins: joins,
			Claims: &workflow.Claims{Owner: owner, TTL: 30 * time.Second}})
		svc := New(Config{Store: st, Engine: engine, Joins: joins, HardwareProfiles: maps.Clone(hardware),
			Images: h.images, UserData: h.userData, Generations: fakeGenerations{}, Ramdisk: fakeRamdisk{}, Presence: h.presence})
		ctx, cancel := context.WithCancel(context.Background())
		if err := engine.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		stop := func() { cancel(); engine.Wait() }
		t.Cleanup(stop)
		return svc, engine, stop
	}
	paused := &pausedRelay{inner: h.machine, answered: make(chan struct{}), resume: make(chan struct{})}
	a, _, stopA := replica("a", clock.NewFake(h.clock.Now()), paused) // its timers never fire: it renews no claim
	var run store.Run
	if err := st.Update(func(tx *store.Tx) (err error) {
		run, _, err = a.Act(tx, "acme", node, Commission, Options{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	a.Start(run)
	select {
	case <-paused.answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the power action was never relayed")
	}

	h.clock.Advance(31 * time.Second) // a's claim has expired
	_, h.engine, _ = replica("b", h.clock, h.machine)
	ended, n := h.end(run.ID)
	if ended.State != store.RunSucceeded || n.PoweredAt.IsZero() {
		t.Fatalf("the run b took over: %s, the machine powered off at %v", ended.State, n.PoweredAt)
	}

	h.clock.Advance(time.Minute)
	close(paused.resume)
	stopA()
	if got := h.node(node).PoweredAt; !got.Equal(n.PoweredAt) {
		t.Errorf("the machine powered off at %v as the registry that drove the run recorded it, and at %v once the registry that lost the run resumed", n.PoweredAt, got)
	}
}
