package agents

import (
	"testing"
	"time"
)

func TestReturnDelay(t *testing.T) {
	const n = 10000
	base := n * time.Second / closeRate
	slot := func(k int) time.Duration { return time.Duration(k) * time.Second / reconnectRate }
	cases := map[string]struct {
		k       int
		elapsed time.Duration
		want    time.Duration
	}{
		"first told":                 {0, 0, base},
		"next one a step later":      {1, 0, base + slot(1)},
		"time spent telling is kept": {1000, 100 * time.Millisecond, base + slot(1000) - 100*time.Millisecond},
		"last told":                  {n - 1, time.Second, base + slot(n-1) - time.Second},
		"moment passed":              {0, time.Hour, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := returnDelay(n, tc.k, tc.elapsed); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if got := returnDelay(10_000_000, 9_999_999, 0); got != maxReturn {
		t.Fatalf("a huge fleet: got %v, want the cap %v", got, maxReturn)
	}
}
