package cli

import (
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

func TestParseExpiry(t *testing.T) {
	now := time.Date(2026, 9, 1, 12, 0, 0, 500, time.UTC)
	for in, want := range map[string]time.Time{
		"":                          {},
		"720h":                      time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC),
		"90m":                       time.Date(2026, 9, 1, 13, 30, 0, 0, time.UTC),
		"2027-01-31T00:00:00Z":      time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC),
		"2027-01-31T02:00:00+02:00": time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC),
	} {
		got, err := parseExpiry(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0s", "-5m", "30d", "2027-01-31", "tomorrow"} {
		if _, err := parseExpiry(in, now); proto.AsError(err).Details.Path != "--expires" {
			t.Errorf("%q: %v, want INVALID_INPUT at --expires", in, err)
		}
	}
}

// FuzzParseExpiry: whatever an operator types, --expires is a time, nothing, or
// INVALID_INPUT at --expires quoting at most a short prefix of it.
func FuzzParseExpiry(f *testing.F) {
	for _, s := range []string{"", "720h", "-1ns", "2027-01-31T00:00:00Z", "9999999999h", "1e9h"} {
		f.Add(s)
	}
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		_, err := parseExpiry(s, now)
		if err == nil {
			return
		}
		e := proto.AsError(err)
		if e.Code != proto.InvalidInput || e.Details.Path != "--expires" || len(e.Message) > 300 {
			t.Fatalf("%q: %v", s, err)
		}
	})
}
