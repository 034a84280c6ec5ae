package labelexpr

import (
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{"nvswitch", "gpu.vendor=nvidia && !lab", "a, b || (c != 'x y')", "!(a=b)", "a=''", "((a))"} {
		f.Add(s)
	}
	// Eval is compared on labels that give each seed's names every interesting value.
	labelSets := []map[string]string{
		{},
		{"a": "b", "b": "x y", "c": "false", "lab": "", "nvswitch": "0", "gpu.vendor": "nvidia"},
		{"a": "", "b": "b", "c": "x y", "lab": "1", "nvswitch": "true", "gpu.vendor": "amd"},
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := Parse(s)
		if err != nil {
			if _, ok := err.(*SyntaxError); !ok {
				t.Fatalf("error %T is not a *SyntaxError", err)
			}
			return
		}
		text := e.String()
		again, err := Parse(text)
		if err != nil {
			t.Fatalf("Parse(%q) (the String of %q): %v", text, s, err)
		}
		if again.String() != text {
			t.Fatalf("String not stable: %q then %q", text, again.String())
		}
		for _, l := range labelSets {
			if e.Eval(l) != again.Eval(l) {
				t.Fatalf("%q and %q disagree on %v", s, text, l)
			}
		}
	})
}
