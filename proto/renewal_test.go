package proto

import (
	"testing"
	"time"
)

func TestRenewDue(t *testing.T) {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	until := from.Add(365 * 24 * time.Hour)
	for _, tc := range []struct {
		at   time.Duration // after from
		want bool
	}{
		{0, false},
		{200 * 24 * time.Hour, false}, // 165 days left
		{243 * 24 * time.Hour, false}, // 122 days left: a third and a little more
		{244 * 24 * time.Hour, true},  // 121 days left
		{400 * 24 * time.Hour, true},  // expired
	} {
		if got := RenewDue(from, until, from.Add(tc.at)); got != tc.want {
			t.Errorf("%s after the start: due %v, want %v", tc.at, got, tc.want)
		}
	}
}
