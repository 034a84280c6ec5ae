package agents

import (
	"context"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

func TestAdmission(t *testing.T) {
	var a admission
	a.limit.Store(defaultAdmission)
	const maxHandshakes = defaultAdmission
	var cancels []context.CancelFunc
	var admitted []context.Context
	for range maxHandshakes {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		got, err := a.admit(ctx, nil)
		if err != nil {
			t.Fatalf("attempt %d refused: %v", len(cancels), err)
		}
		admitted = append(admitted, got)
	}
	if _, err := a.admit(context.Background(), nil); err != errBusy {
		t.Fatalf("one past the limit: got %v, want errBusy", err)
	}
	// One handshake fails (its context ends), one is accepted: two places free up.
	cancels[0]()
	admitted[1].Value(ticketKey{}).(*ticket).release()
	admitted[1].Value(ticketKey{}).(*ticket).release() // given back once only
	waitInFlight(t, &a, maxHandshakes-2)
	admitted[1].Value(ticketKey{}).(*ticket).abandon() // ends after its acceptance: not counted
	if got := a.abandoned.Load(); got != 1 {
		t.Fatalf("%d abandoned, want the one that failed", got)
	}
	for range 2 {
		if _, err := a.admit(context.Background(), nil); err != nil {
			t.Fatalf("after places freed up: %v", err)
		}
	}
	if _, err := a.admit(context.Background(), nil); err != errBusy {
		t.Fatalf("full again: got %v, want errBusy", err)
	}
}

// waitInFlight waits for context.AfterFunc callbacks to give their places back.
func waitInFlight(t *testing.T, a *admission, want int64) {
	t.Helper()
	for range 1000 {
		if a.inFlight.Load() == want {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d in flight, want %d", a.inFlight.Load(), want)
}

// TestAttemptsRefusedByTheAgentsCount: a return is planned on the attempts the agents
// told refused in their hellos, each hello adding at most maxReported, never more than
// the first packets the endpoint refused; once an agent of an earlier version (no count
// in its hello) said hello, on the endpoint's count. A first message that was no hello
// is counted read, and adds nothing.
func TestAttemptsRefusedByTheAgentsCount(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	var a admission
	for _, h := range []*proto.Hello{{RefusedAttempts: n(0)}, {RefusedAttempts: n(3)}, nil, {RefusedAttempts: n(1_000_000)}} {
		a.helloRead(h)
	}
	if got, want := a.reported.Load(), int64(3+maxReported); got != want {
		t.Fatalf("%d attempts reported, want %d: a hello adds at most %d", got, want, maxReported)
	}
	if got := a.hellos.Load(); got != 4 {
		t.Fatalf("%d hellos read, want 4", got)
	}
	if got := a.attemptsRefused(1000); got != 3+maxReported {
		t.Errorf("planned on %d attempts refused (1,000 first packets), want the agents' %d", got, 3+maxReported)
	}
	if got := a.attemptsRefused(5); got != 5 {
		t.Errorf("planned on %d attempts refused (5 first packets), want no more than the endpoint refused", got)
	}
	a.helloRead(&proto.Hello{}) // an agent of an earlier version
	if got := a.attemptsRefused(1000); got != 1000 {
		t.Errorf("planned on %d attempts refused after an agent that counts none said hello, want the endpoint's 1,000", got)
	}
}
