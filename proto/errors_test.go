package proto

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// named is a string type that says itself.
type named string

func (n named) String() string { return "named " + string(n) }

func TestErrorfQuotesAShortPrefixOfAnInput(t *testing.T) {
	long := strings.Repeat("a", 4<<20)
	wide := "x" + strings.Repeat("é", MaxQuoted) // two bytes each: the cut falls inside one
	tests := map[string]struct {
		err  *Error
		want string
	}{
		"short input":        {Errorf(InvalidInput, "node id %q: bad", "n1"), `node id "n1": bad`},
		"huge input":         {Errorf(InvalidInput, "node id %q: bad", long), `node id "` + long[:MaxQuoted] + `…": bad`},
		"cut at a character": {Errorf(InvalidInput, "%q", wide), `"` + wide[:MaxQuoted-1] + `…"`},
		"exactly the limit":  {Errorf(InvalidInput, "%q", long[:MaxQuoted]), `"` + long[:MaxQuoted] + `"`},
		"escapes":            {Errorf(InvalidInput, "%q", "a\"\n"), `"a\"\n"`},
		// 50 bytes, 200 quoted: the quoted form is what is bounded.
		"escaped bytes":      {Errorf(InvalidInput, "%q", strings.Repeat("\xe0", 50)), `"` + strings.Repeat(`\xe0`, MaxQuoted/4) + `…"`},
		"escapes at the cut": {Errorf(InvalidInput, "%q", long[:MaxQuoted-1]+"\n"), `"` + long[:MaxQuoted-1] + `…"`},
		"%s is the message":  {Errorf(InvalidInput, "%s: %d", "a message of any length "+long[:200], 3), "a message of any length " + long[:200] + ": 3"},
		"width and %v":       {Errorf(InvalidInput, "[%5s] %v", "ab", "cd"), "[   ab] cd"},
		"not a string":       {Errorf(InvalidInput, "%q", []string{"x"}), `["x"]`},
		// An image kind as a request names it: 4 MiB once echoed whole.
		"a string type":              {Errorf(InvalidInput, "kind %q", ImageKind(long)), `kind "` + long[:MaxQuoted] + `…"`},
		"a string type that says it": {Errorf(InvalidInput, "%q", named("x")), `"named x"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.err.Message != tc.want {
				got, want := tc.err.Message, tc.want
				if len(got) > 300 {
					got = got[:300] + "..."
				}
				if len(want) > 300 {
					want = want[:300] + "..."
				}
				t.Errorf("message %q, want %q", got, want)
			}
		})
	}
}

// TestAsErrorOfNoError: AsError of a nil error is one of no code, which no check of a
// code, path or reason takes for the error it looks for; before, it was a nil *Error,
// and the check of a test whose call wrongly returned nil panicked instead of failing.
func TestAsErrorOfNoError(t *testing.T) {
	e := AsError(nil)
	for _, code := range Codes {
		if e.Code == code {
			t.Errorf("AsError(nil) has code %s, which a check of an error of that code takes for it", code)
		}
	}
	if e.Details.Path != "" || e.Details.Reason != "" || e.Message != "no error" {
		t.Errorf("AsError(nil) = %+v, want no path or reason and the message no error", e)
	}
	if at := e.WithPath("nodeId"); at.Details.Path != "nodeId" || e.Details.Path != "" {
		t.Errorf("WithPath of AsError(nil): %+v, and the original became %+v", at, e)
	}
}

// TestCodeOfNoError: CodeOf of a nil error is no code, which no check of a code takes
// for the error it looks for; before, it was INTERNAL, and a test that checked for an
// INTERNAL error passed on a call that wrongly returned none.
func TestCodeOfNoError(t *testing.T) {
	if code := CodeOf(nil); code != "" {
		t.Errorf("CodeOf(nil) = %s, want no code", code)
	}
	if code := CodeOf(errors.New("disk gone")); code != Internal {
		t.Errorf("CodeOf of an error of no code = %s, want INTERNAL", code)
	}
	if code := CodeOf(fmt.Errorf("reading: %w", Errorf(NotFound, "no node"))); code != NotFound {
		t.Errorf("CodeOf of a wrapped NOT_FOUND = %s", code)
	}
}
