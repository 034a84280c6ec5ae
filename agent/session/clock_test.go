package session

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
)

// TestSessionRunsOnItsClock checks that the session's waits and stamps follow its
// clock: a signed result carries the clock's time, and the reconnect backoff waits on
// the clock (nothing listens at the registry's address, so every dial fails).
func TestSessionRunsOnItsClock(t *testing.T) {
	clk := clock.NewFake(time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC))
	a := newTestAgent(t, "ramdisk", Config{Clock: clk, Backoff: Backoff{Min: time.Hour, Max: time.Hour}})

	ctx := context.WithValue(context.WithValue(t.Context(), agentKey{}, a), cmdKey{}, &run{id: "wf_1.3.1"})
	raw, err := SignResult(ctx, proto.CommandDiskWipe, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	var sr proto.SignedResult
	var p proto.ResultPayload
	if err := json.Unmarshal(raw, &sr); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(sr.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if !p.Time.Equal(clk.Now()) {
		t.Errorf("signed at %v, want the clock's %v", p.Time, clk.Now())
	}

	run, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.Run(run); close(done) }()
	defer func() { stop(); <-done }()
	waiting := make(chan struct{})
	go func() { clk.BlockUntil(1); close(waiting) }()
	select {
	case <-waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent does not wait for its reconnect on its clock")
	}
}
