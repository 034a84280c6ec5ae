package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleepWaitsItsTimeOrTheContext(t *testing.T) {
	f := NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	done := make(chan error, 1)
	go func() { done <- Sleep(context.Background(), f, time.Minute) }()
	f.BlockUntil(1)
	f.Advance(59 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("Sleep returned %v before its time", err)
	default:
	}
	f.Advance(time.Second)
	if err := <-done; err != nil {
		t.Errorf("Sleep after its time: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- Sleep(ctx, f, time.Hour) }()
	f.BlockUntil(1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep cut short by its context: %v, want context.Canceled", err)
	}
	if f.Waiters() != 0 {
		t.Errorf("Sleep left %d timers waiting", f.Waiters())
	}

	if err := Sleep(ctx, Real{}, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on an ended context: %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), f, 0); err != nil {
		t.Errorf("Sleep of 0: %v", err)
	}
	if err := Sleep(ctx, f, -time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep of less than 0 on an ended context: %v, want context.Canceled", err)
	}
}
