package cli

import (
	"testing"
	"time"
)

// FuzzSecondsFlag: --ttl takes a value or refuses it; a value it takes is a positive
// whole number of seconds, and what it prints back parses to the same.
func FuzzSecondsFlag(f *testing.F) {
	for _, s := range []string{"5", "5s", "90m", "24h", "1.5s", "1500ms", "0", "-3", "9223372036", "9223372037", "", "1h0m1s", "s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v secondsFlag
		if v.Set(s) != nil {
			return
		}
		if v.d <= 0 || v.d%time.Second != 0 {
			t.Fatalf("--ttl %q took %v", s, v.d)
		}
		var again secondsFlag
		if err := again.Set(v.String()); err != nil || again.d != v.d {
			t.Fatalf("--ttl %q printed as %q reads as %v, %v", s, v.String(), again.d, err)
		}
	})
}
