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
