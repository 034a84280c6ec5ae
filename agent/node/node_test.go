package node

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/metrics"
	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/hostconverge"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// startAgent makes a node agent in a temporary config dir, its session never connected,
// and runs the real converger under a temporary root on clk, with a period of a minute,
// until the test ends. It returns the agent, its config dir and the test's context.
func startAgent(t *testing.T, clk clock.Clock) (*agent, string, context.Context) {
	t.Helper()
	ca, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.AgentCertificate("nd_1", "node")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	a := newAgent(dir, log)
	if a.session, err = session.New(session.Config{Addr: "127.0.0.1:1", Certificate: cert, Clock: clk, Log: log}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	conv := &hostconverge.Converger{Root: t.TempDir(), Runner: hostconverge.ExecRunner{}, Log: log, Clock: clk, Period: time.Minute}
	done := make(chan struct{})
	go func() { conv.Run(ctx, a.specs, a); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return a, dir, ctx
}

// TestApplyAcknowledgesOnlyAppliedGenerations runs apply against the real converger
// under a temporary root: a spec whose pass applies is saved and acknowledged, one with a
// unit bcd does not know is refused with its error and the saved spec stays.
func TestApplyAcknowledgesOnlyAppliedGenerations(t *testing.T) {
	a, dir, ctx := startAgent(t, clock.Real{})

	if err := a.apply(ctx, proto.NodeSpec{Node: "nd_1", Role: proto.RoleNode, Generation: 1}); err != nil {
		t.Fatalf("an empty host section: %v", err)
	}
	saved := func() int64 {
		var spec proto.NodeSpec
		b, _ := os.ReadFile(filepath.Join(dir, StateFile))
		json.Unmarshal(b, &spec)
		return spec.Generation
	}
	if g := saved(); g != 1 {
		t.Errorf("saved generation %d, want 1", g)
	}
	err := a.apply(ctx, proto.NodeSpec{Node: "nd_1", Role: proto.RoleNode, Generation: 2, Host: []proto.HostUnit{{Unit: "frobnicate"}}})
	if proto.CodeOf(err) != proto.Unsupported {
		t.Errorf("an unknown unit: %v, want UNSUPPORTED", err)
	}
	if g := saved(); g != 1 {
		t.Errorf("saved generation %d after a failed pass, want 1", g)
	}
}

// TestAppliedGenerationIsAcknowledgedOnceSaved checks that the node agent alone decides
// when a generation is acknowledged: a generation whose first pass applied but could not
// be saved is not acknowledged, and a later pass that applies it saves and acknowledges
// it, however long the state file stayed unwritable.
func TestAppliedGenerationIsAcknowledgedOnceSaved(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	a, dir, ctx := startAgent(t, clk)

	// The state file cannot be written: a directory stands in its place.
	state := filepath.Join(dir, StateFile)
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := a.apply(ctx, proto.NodeSpec{Node: "nd_1", Role: proto.RoleNode, Generation: 1}); err == nil {
		t.Fatal("applied a spec it could not save")
	}
	clk.BlockUntil(1)
	if g := a.session.ObservedGeneration(); g != 0 {
		t.Fatalf("acknowledged generation %d before it was saved", g)
	}
	// The next pass, once the state file can be written, acknowledges it.
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	clk.BlockUntil(1)
	if g := a.session.ObservedGeneration(); g != 1 {
		t.Fatalf("acknowledged generation %d after a pass applied and saved it, want 1", g)
	}
	var saved proto.NodeSpec
	b, err := os.ReadFile(state)
	if err == nil {
		err = json.Unmarshal(b, &saved)
	}
	if err != nil || saved.Generation != 1 {
		t.Fatalf("saved %+v, %v", saved, err)
	}
}

// TestPassesAreCounted: with metrics, each converger pass the agent is told of is
// counted, a pass with a unit bcd does not know as a failed one under that unit, and the
// session's state is shown (never connected here).
func TestPassesAreCounted(t *testing.T) {
	a, _, ctx := startAgent(t, clock.Real{})
	a.metrics = metrics.NewNode(a.session.Connected)
	a.apply(ctx, proto.NodeSpec{Node: "nd_1", Role: proto.RoleNode, Generation: 1})
	a.apply(ctx, proto.NodeSpec{Node: "nd_1", Role: proto.RoleNode, Generation: 2, Host: []proto.HostUnit{{Unit: "frobnicate"}}})
	want := `
# HELP bcd_hostconverge_failures_total Units that failed in a pass, by unit and code.
# TYPE bcd_hostconverge_failures_total counter
bcd_hostconverge_failures_total{code="UNSUPPORTED",unit="frobnicate"} 1
# HELP bcd_hostconverge_passes_total Host converger passes, by result (applied: no unit failed, failed).
# TYPE bcd_hostconverge_passes_total counter
bcd_hostconverge_passes_total{result="applied"} 1
bcd_hostconverge_passes_total{result="failed"} 1
# HELP bcd_session_connected 1 while the agent holds its session with the registry, else 0.
# TYPE bcd_session_connected gauge
bcd_session_connected 0
`
	if err := testutil.GatherAndCompare(a.metrics.Gatherer(), strings.NewReader(want), "bcd_hostconverge_failures_total",
		"bcd_hostconverge_passes_total", "bcd_session_connected"); err != nil {
		t.Error(err)
	}
}

// TestAnotherNodesSavedSpecIsNotApplied: a `bcd join` as another node into a config
// directory keeps the nodespec.json the earlier node's agent saved. The agent started
// after it neither converges that spec's host units nor reports its generation (the
// registry, told the generation it pushes is applied, would push nothing); its own
// node's saved spec it takes. Before, it applied whatever the file held.
func TestAnotherNodesSavedSpecIsNotApplied(t *testing.T) {
	a := newAgent(t.TempDir(), slog.New(slog.DiscardHandler))
	saved := proto.NodeSpec{Node: "nd_old", Role: proto.RoleNode, Generation: 7, Labels: map[string]string{"cluster": "old"}}
	if err := a.save(saved); err != nil {
		t.Fatal(err)
	}
	if got, err := a.load("nd_new"); err != nil || got.Generation != 0 || got.Labels != nil {
		t.Errorf("node nd_new loads %+v, %v; want no spec", got, err)
	}
	if got, err := a.load("nd_old"); err != nil || got.Generation != 7 {
		t.Errorf("node nd_old loads %+v, %v; want its own spec of generation 7", got, err)
	}
}
