package profile

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	tests := map[string]struct {
		in        string
		want      time.Duration
		canonical string
	}{
		"seconds":       {"30s", 30 * time.Second, "30s"},
		"minutes":       {"15m", 15 * time.Minute, "15m"},
		"hours":         {"1h", time.Hour, "1h"},
		"combined":      {"1h30m", 90 * time.Minute, "1h30m"},
		"all units":     {"1h2m3s", time.Hour + 2*time.Minute + 3*time.Second, "1h2m3s"},
		"carried":       {"90m", 90 * time.Minute, "1h30m"},
		"zero part":     {"1h0m", time.Hour, "1h"},
		"shortest":      {"1s", time.Second, "1s"},
		"longest":       {"24h", 24 * time.Hour, "24h"},
		"longest other": {"1440m", 24 * time.Hour, "24h"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseDuration(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || formatDuration(got) != tc.canonical {
				t.Errorf("got %v written %q, want %v written %q", got, formatDuration(got), tc.want, tc.canonical)
			}
		})
	}
	for _, bad := range []string{"", "0s", "0h0m0s", "24h1s", "86401s", "30", "1.5h", "-1m", "1d", "1m1h", "1h 30m", "01m", "1H", "99999999h", "1hh"} {
		t.Run("refuses "+bad, func(t *testing.T) {
			if d, err := ParseDuration(bad); err == nil {
				t.Errorf("accepted as %v", d)
			}
		})
	}
}
