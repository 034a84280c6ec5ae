package session

import (
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestBackoffDelay(t *testing.T) {
	cases := map[string]struct {
		b       Backoff
		rand    float64
		attempt int
		want    time.Duration
	}{
		"first, no jitter":       {Backoff{Min: time.Second, Max: time.Minute}, 0, 0, 500 * time.Millisecond},
		"first, most jitter":     {Backoff{Min: time.Second, Max: time.Minute}, 0.999999, 0, 999999500 * time.Nanosecond},
		"doubles":                {Backoff{Min: time.Second, Max: time.Minute}, 0, 3, 4 * time.Second},
		"capped":                 {Backoff{Min: time.Second, Max: time.Minute}, 0.5, 10, 45 * time.Second},
		"huge attempt is capped": {Backoff{Min: time.Second, Max: time.Minute}, 0, 1000, 30 * time.Second},
		"shift overflow":         {Backoff{Min: time.Hour, Max: 1 << 62}, 0, 40, 1 << 61},
		"defaults":               {Backoff{}, 0, 0, DefaultMinBackoff / 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.b.Rand = func() float64 { return tc.rand }
			if diff := cmp.Diff(tc.want, tc.b.Delay(tc.attempt)); diff != "" {
				t.Errorf("delay (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBackoffWithin(t *testing.T) {
	b := Backoff{Rand: func() float64 { return 0.25 }}
	if got := b.within(8 * time.Second); got != 2*time.Second {
		t.Fatalf("got %v, want 2s", got)
	}
}

func TestReslotAfterTheStream(t *testing.T) {
	now := time.Unix(1000, 0)
	r := returnStream{end: now.Add(8 * time.Second), spread: 2 * time.Second, left: 2}
	b := Backoff{Rand: func() float64 { return 0.5 }}
	if got, ok := r.reslot(now, b); !ok || got != 9*time.Second {
		t.Fatalf("refused within the stream: %v, %v; want 9s (its end and half the spread)", got, ok)
	}
	if got, ok := r.reslot(now.Add(20*time.Second), b); !ok || got != time.Second {
		t.Fatalf("refused after the stream ended: %v, %v; want 1s (half the spread from now)", got, ok)
	}
	if _, ok := r.reslot(now, b); ok {
		t.Fatal("re-slotted past the limit, want the backoff to decide")
	}
	if _, ok := (&returnStream{}).reslot(now, b); ok {
		t.Fatal("no stream named: re-slotted, want the backoff to decide")
	}
}

// TestReslotWithinTheSpreadTheRegistryNamed: an agent refused on its return comes back
// within the spread its registry named past the stream's end (1.2 s: it comes back at
// 8.6 s, half of it past the 8 s end), or, told by an older registry that named none,
// within a quarter of the stream (2 s of 8: back at 9 s).
func TestReslotWithinTheSpreadTheRegistryNamed(t *testing.T) {
	now := time.Unix(1000, 0)
	b := Backoff{Rand: func() float64 { return 0.5 }}
	for reason, want := range map[string]time.Duration{
		proto.ShutdownReason(2*time.Second, 8*time.Second, 1200*time.Millisecond): 8600 * time.Millisecond,
		"registry shutting down; reconnect in 2000ms; stream ends in 8000ms":      9 * time.Second,
	} {
		var r retries
		r.next(now, b, true, proto.CloseShutdown, reason)
		if got := r.next(now, b, false, proto.CloseNormal, ""); got != want {
			t.Errorf("told %q, refused: waits %v, want %v", reason, got, want)
		}
	}
}

// TestRetriesAfterTheReslots: an agent told of a return stream re-slots its first
// refused tries after the stream's end; refused more often than that, it starts the
// backoff again from its shortest step, rather than at the step its re-slotted tries
// would have reached (4-8 s after three), which left agents out for 30 s and more at
// the end of a return.
func TestRetriesAfterTheReslots(t *testing.T) {
	now := time.Unix(1000, 0)
	b := Backoff{Rand: func() float64 { return 0.5 }}
	var r retries
	if got := r.next(now, b, true, proto.CloseShutdown, proto.ShutdownReason(2*time.Second, 8*time.Second, 2*time.Second)); got != 2*time.Second {
		t.Fatalf("closed for a restart: waits %v, want the 2s the registry named", got)
	}
	// Re-slotted: after the stream's end (8s from the close), half a spread of 2s.
	for i := range proto.ReslotTries {
		if got := r.next(now, b, false, proto.CloseNormal, ""); got != 9*time.Second {
			t.Fatalf("refused try %d: waits %v, want 9s (re-slotted after the stream)", i+1, got)
		}
	}
	for i, want := range []time.Duration{b.Delay(0), b.Delay(1), b.Delay(2)} {
		if got := r.next(now.Add(20*time.Second), b, false, proto.CloseNormal, ""); got != want {
			t.Fatalf("refused try %d after the re-slots: waits %v, want %v (the backoff from its start)", proto.ReslotTries+i+1, got, want)
		}
	}
	if r.failed != proto.ReslotTries+4 {
		t.Fatalf("counted %d failed tries, want %d", r.failed, proto.ReslotTries+4)
	}
	// A session resets it all; a replaced session waits the longest step.
	r.next(now, b, true, proto.CloseNormal, "")
	if r.failed != 1 || r.backoff != 1 || r.ret.left != 0 {
		t.Fatalf("after a session: %+v, want one failed try, the backoff at its second step, no stream", r)
	}
	if got := r.next(now, b, false, proto.CloseReplaced, ""); got != b.Delay(maxAttempt) {
		t.Fatalf("replaced: waits %v, want the backoff's longest %v", got, b.Delay(maxAttempt))
	}
}
