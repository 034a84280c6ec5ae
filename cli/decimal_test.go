package cli

import (
	"strings"
	"testing"
)

// TestSizeFlagTakesDecimalDigitsAlone: --size holds what the operator wrote or refuses it;
// a sign, a leading zero, a base prefix, an underscore or a space is refused at the flag.
func TestSizeFlagTakesDecimalDigitsAlone(t *testing.T) {
	for _, s := range []string{"0", "1", "1048576", "9007199254740992", "9223372036854775807"} {
		var f sizeFlag
		if err := f.Set(s); err != nil || f.String() != s {
			t.Errorf("--size %q: %q, %v", s, f.String(), err)
		}
	}
	for _, s := range []string{"", "+5", "-1", "-0", "05", "0x10", "0o7", "1_000", " 5", "5 ", "1e6", "5B", "9223372036854775808", "big"} {
		var f sizeFlag
		if err := f.Set(s); err == nil || f.n != nil {
			t.Errorf("--size %q: took %v", s, f.String())
		}
	}
}

// FuzzSizeFlag: --size takes a value or refuses it; a value it takes is not negative and
// prints back exactly as written, so the size sent is the size typed.
func FuzzSizeFlag(f *testing.F) {
	for _, s := range []string{"1048576", "+5", "-1", "0", "007", "0x10", "1_000", "9223372036854775807", "9223372036854775808", "", " 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v sizeFlag
		err := v.Set(s)
		if err != nil {
			if v.n != nil || !strings.Contains(err.Error(), "decimal digits") {
				t.Fatalf("--size %q refused as %v, holding %q", s, err, v.String())
			}
			return
		}
		if *v.n < 0 || v.String() != s {
			t.Fatalf("--size %q took %d, printed %q", s, *v.n, v.String())
		}
	})
}
