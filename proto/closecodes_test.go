package proto

import (
	"testing"
	"time"
)

// reasonCase is a close reason and what a reader of it reads: the wait, and whether the
// reason names one.
type reasonCase struct {
	reason string
	want   time.Duration
	ok     bool
}

// readsAs checks that read reads each case's reason as the case says.
func readsAs(t *testing.T, read func(string) (time.Duration, bool), cases map[string]reasonCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := read(tc.reason)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("got %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestShutdownDelay(t *testing.T) {
	cases := map[string]reasonCase{
		"round trip":   {ShutdownReason(7500*time.Millisecond, 9*time.Second, 2*time.Second), 7500 * time.Millisecond, true},
		"zero":         {ShutdownReason(0, 0, 0), 0, true},
		"without end":  {"registry shutting down; reconnect in 5ms", 5 * time.Millisecond, true},
		"other reason": {"replaced by a newer session", 0, false},
		"empty":        {"", 0, false},
		"negative":     {"registry shutting down; reconnect in -5ms", 0, false},
		"older phrase": {"registry shutting down; reconnect within 5000ms", 0, false},
		"overflow":     {"registry shutting down; reconnect in 9223372036854775807ms", 0, false},
	}
	readsAs(t, ShutdownDelay, cases)
}

func TestShutdownStreamEnd(t *testing.T) {
	cases := map[string]reasonCase{
		"round trip":          {ShutdownReason(7500*time.Millisecond, 9*time.Second, 2*time.Second), 9 * time.Second, true},
		"an older registry's": {"registry shutting down; reconnect in 5ms", 0, false},
		"without a spread":    {"registry shutting down; reconnect in 5ms; stream ends in 90ms", 90 * time.Millisecond, true},
		"negative":            {"registry shutting down; reconnect in 5ms; stream ends in -1ms", 0, false},
		"other reason":        {"replaced by a newer session", 0, false},
	}
	readsAs(t, ShutdownStreamEnd, cases)
}

// TestShutdownReslotSpread: the spread a registry names reads back; a phrase without one
// (an older registry's), or with a negative or impossible figure in it, names none.
func TestShutdownReslotSpread(t *testing.T) {
	cases := map[string]reasonCase{
		"round trip":          {ShutdownReason(7500*time.Millisecond, 9*time.Second, 1500*time.Millisecond), 1500 * time.Millisecond, true},
		"an older registry's": {"registry shutting down; reconnect in 5ms; stream ends in 90ms", 0, false},
		"negative spread":     {"registry shutting down; reconnect in 5ms; stream ends in 90ms; refused retry within -1ms", 0, false},
		"negative end":        {"registry shutting down; reconnect in 5ms; stream ends in -90ms; refused retry within 1ms", 0, false},
		"overflow":            {"registry shutting down; reconnect in 5ms; stream ends in 90ms; refused retry within 9223372036854775807ms", 0, false},
		"other reason":        {"replaced by a newer session", 0, false},
	}
	readsAs(t, ShutdownReslotSpread, cases)
}

// FuzzShutdownReason reads any close reason a registry could send: a phrase read at all
// gives no negative wait, and a phrase the registry writes reads back as written.
func FuzzShutdownReason(f *testing.F) {
	f.Add("registry shutting down; reconnect in 5ms; stream ends in 90ms; refused retry within 1000ms")
	f.Add("registry shutting down; reconnect in 5ms; stream ends in 90ms")
	f.Add("registry shutting down; reconnect in 5ms")
	f.Add("registry shutting down; reconnect in 9223372036854775807ms; stream ends in -1ms")
	f.Add("replaced by a newer session of the same node")
	f.Fuzz(func(t *testing.T, reason string) {
		delay, okDelay := ShutdownDelay(reason)
		end, okEnd := ShutdownStreamEnd(reason)
		spread, okSpread := ShutdownReslotSpread(reason)
		if (okDelay && delay < 0) || (okEnd && end < 0) || (okSpread && spread < 0) {
			t.Fatalf("%q: delay %v, stream end %v, spread %v: a negative wait", reason, delay, end, spread)
		}
		if okEnd && !okDelay || okSpread && !okEnd {
			t.Fatalf("%q: a stream end without a delay, or a spread without a stream end", reason)
		}
		if okSpread {
			again := ShutdownReason(delay, end, spread)
			d2, _ := ShutdownDelay(again)
			e2, _ := ShutdownStreamEnd(again)
			s2, _ := ShutdownReslotSpread(again)
			if d2 != delay || e2 != end || s2 != spread {
				t.Fatalf("%q read as %v, %v, %v; written again as %q, read as %v, %v, %v", reason, delay, end, spread, again, d2, e2, s2)
			}
		}
	})
}

// TestReslotSpreadFor: a registry that refused few agents of its last return names a
// spread that takes back, at the stream's own rate, 5% of the fleet or half as many again
// as it refused last, whichever is more: 6 s of a 2-minute stream after a return that
// refused none or 2%, 18 s after one that refused 10%; never more than a quarter of the
// stream (after one that refused 20%), never less than 250 ms: 0.34 s of a 6.8 s stream
// of 10,000 agents after a return that refused 1% (a second before).
func TestReslotSpreadFor(t *testing.T) {
	const stream = 2 * time.Minute
	for _, tc := range []struct {
		end   time.Duration
		share float64
		want  time.Duration
	}{
		{stream, 0, 6 * time.Second}, {stream, 0.02, 6 * time.Second}, {stream, 0.10, 18 * time.Second},
		{stream, 0.20, 30 * time.Second}, {stream, 1, 30 * time.Second}, {10 * time.Second, 0, 500 * time.Millisecond},
		{6800 * time.Millisecond, 0.01, 340 * time.Millisecond}, {time.Second, 0, 250 * time.Millisecond}, {0, 0.5, 250 * time.Millisecond},
	} {
		if got := ReslotSpreadFor(tc.end, tc.share); got != tc.want {
			t.Errorf("ReslotSpreadFor(%v, %v) = %v, want %v", tc.end, tc.share, got, tc.want)
		}
	}
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
