package agents

import (
	"context"
	"testing"
	"time"
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
