package proto

import (
	"testing"
	"time"
)

func TestShutdownDelay(t *testing.T) {
	cases := map[string]struct {
		reason string
		want   time.Duration
		ok     bool
	}{
		"round trip":   {ShutdownReason(7500*time.Millisecond, 9*time.Second), 7500 * time.Millisecond, true},
		"zero":         {ShutdownReason(0, 0), 0, true},
		"without end":  {"registry shutting down; reconnect in 5ms", 5 * time.Millisecond, true},
		"other reason": {"replaced by a newer session", 0, false},
		"empty":        {"", 0, false},
		"negative":     {"registry shutting down; reconnect in -5ms", 0, false},
		"older phrase": {"registry shutting down; reconnect within 5000ms", 0, false},
		"overflow":     {"registry shutting down; reconnect in 9223372036854775807ms", 0, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := ShutdownDelay(tc.reason)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("got %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestShutdownStreamEnd(t *testing.T) {
	cases := map[string]struct {
		reason string
		want   time.Duration
		ok     bool
	}{
		"round trip":          {ShutdownReason(7500*time.Millisecond, 9*time.Second), 9 * time.Second, true},
		"an older registry's": {"registry shutting down; reconnect in 5ms", 0, false},
		"negative":            {"registry shutting down; reconnect in 5ms; stream ends in -1ms", 0, false},
		"other reason":        {"replaced by a newer session", 0, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := ShutdownStreamEnd(tc.reason)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("got %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzShutdownReason reads any close reason a registry could send: a phrase read at all
// gives no negative wait, and a phrase the registry writes reads back as written.
func FuzzShutdownReason(f *testing.F) {
	f.Add("registry shutting down; reconnect in 5ms; stream ends in 90ms")
	f.Add("registry shutting down; reconnect in 5ms")
	f.Add("registry shutting down; reconnect in 9223372036854775807ms; stream ends in -1ms")
	f.Add("replaced by a newer session of the same node")
	f.Fuzz(func(t *testing.T, reason string) {
		delay, okDelay := ShutdownDelay(reason)
		end, okEnd := ShutdownStreamEnd(reason)
		if (okDelay && delay < 0) || (okEnd && end < 0) {
			t.Fatalf("%q: delay %v, stream end %v: a negative wait", reason, delay, end)
		}
		if okEnd && !okDelay {
			t.Fatalf("%q: a stream end without a delay", reason)
		}
		if okDelay && okEnd {
			again := ShutdownReason(delay, end)
			d2, _ := ShutdownDelay(again)
			e2, _ := ShutdownStreamEnd(again)
			if d2 != delay || e2 != end {
				t.Fatalf("%q read as %v, %v; written again as %q, read as %v, %v", reason, delay, end, again, d2, e2)
			}
		}
	})
}

// TestReslotSpread: an agent refused on its return tries again within a quarter of the
// stream after its end, at least a second: 2 minutes for a stream of 8, 2.5 for the
// longest a registry names (10 minutes), a second for a stream of a few seconds.
func TestReslotSpread(t *testing.T) {
	for end, want := range map[time.Duration]time.Duration{
		8 * time.Minute: 2 * time.Minute, 10 * time.Minute: 150 * time.Second, 2 * time.Second: time.Second, 0: time.Second,
	} {
		if got := ReslotSpread(end); got != want {
			t.Errorf("ReslotSpread(%v) = %v, want %v", end, got, want)
		}
	}
}
