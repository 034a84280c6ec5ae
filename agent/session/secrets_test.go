package session

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// TestSecretWithoutASession checks that Secret fails clearly when the agent has no
// session, and that a session that ends fails the requests waiting on it.
func TestSecretWithoutASession(t *testing.T) {
	a := newTestAgent(t, "node", Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if v, err := a.Secret(ctx, "secret://k8s/join"); proto.CodeOf(err) != proto.InvalidState || v != nil {
		t.Fatalf("without a session: %q, %v; want INVALID_STATE", v, err)
	}

	answer := make(chan callResult, 1)
	a.mu.Lock()
	a.calls["call-9"] = answer
	a.sessionEndedLocked(io.EOF)
	a.mu.Unlock()
	if r := <-answer; r.m != nil || r.ended != io.EOF {
		t.Fatalf("a session that ended answered %+v; want how it ended, which call reports as INVALID_STATE", r)
	}
	a.answered("call-9", &proto.Message{Type: proto.MsgSecret, Secret: &proto.Secret{ID: "call-9", Value: []byte("late")}}) // given up: dropped
}
