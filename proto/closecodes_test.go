package proto

import (
	"testing"
	"time"
)

func TestShutdownSpread(t *testing.T) {
	cases := map[string]struct {
		reason string
		want   time.Duration
	}{
		"round trip":   {ShutdownReason(7500 * time.Millisecond), 7500 * time.Millisecond},
		"zero":         {ShutdownReason(0), 0},
		"other reason": {"replaced by a newer session", 0},
		"empty":        {"", 0},
		"negative":     {"registry shutting down; reconnect within -5ms", 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ShutdownSpread(tc.reason); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
