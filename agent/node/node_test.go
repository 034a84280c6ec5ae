package node

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/hostconverge"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// TestApplyAcknowledgesOnlyAppliedGenerations runs apply against the real converger
// under a temporary root: a spec whose pass applies is saved and acknowledged, one with a
// unit bcd does not know is refused with its error and the saved spec stays.
func TestApplyAcknowledgesOnlyAppliedGenerations(t *testing.T) {
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
	if a.session, err = session.New(session.Config{Addr: "127.0.0.1:1", Certificate: cert, Log: log}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	conv := &hostconverge.Converger{Root: t.TempDir(), Runner: hostconverge.ExecRunner{}, Log: log}
	done := make(chan struct{})
	go func() { conv.Run(ctx, a.specs, a); close(done) }()
	defer func() { cancel(); <-done }()

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
	err = a.apply(ctx, proto.NodeSpec{Node: "nd_1", Role: proto.RoleNode, Generation: 2, Host: []proto.HostUnit{{Unit: "frobnicate"}}})
	if proto.CodeOf(err) != proto.Unsupported {
		t.Errorf("an unknown unit: %v, want UNSUPPORTED", err)
	}
	if g := saved(); g != 1 {
		t.Errorf("saved generation %d after a failed pass, want 1", g)
	}
}
