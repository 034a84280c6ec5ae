package jsondoc

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFieldsReportsInDocumentOrder(t *testing.T) {
	doc := `{"b": "x", "zz": 1, "a": 7, "c": {"d": true}}`
	v, perr := Parse([]byte(doc), testLimits)
	if perr != nil {
		t.Fatal(perr)
	}
	var r Report
	r.Fields(v, "", map[string]Check{
		"a": func(v *Value, p Path) { r.Whole(v, p, 1, 5) },
		"b": func(v *Value, p Path) { r.Enum(v, p, "y", "z") },
		"c": func(v *Value, p Path) {
			r.Fields(v, p, map[string]Check{"d": func(v *Value, p Path) { r.String(v, p) }}, "e")
		},
	}, "a", "f")
	type problem struct {
		Path    Path
		Message string
	}
	var got []problem
	for _, p := range r.Problems() {
		got = append(got, problem{p.Path, p.Message})
	}
	want := []problem{
		{"b", `"x" is not one of "y" or "z"`},
		{"zz", `unknown field "zz"; the fields are "a", "b" or "c"`},
		{"a", "7 is not a whole number from 1 to 5"},
		{"c.d", "must be a string, not a boolean"},
		{"c.e", "e is required"},
		{"f", "f is required"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestWholeNumber(t *testing.T) {
	tests := map[string]struct {
		text string
		want int64
		err  string
	}{
		"integer":        {"42", 42, ""},
		"negative":       {"-3", -3, ""},
		"negative zero":  {"-0", 0, ""},
		"fraction":       {"1.5", 0, "write it without a fraction or an exponent"},
		"whole fraction": {"2.0", 0, "write it without a fraction or an exponent"},
		"exponent":       {"1e2", 0, "write it without a fraction or an exponent"},
		"huge exponent":  {"1e400", 0, "write it without a fraction or an exponent"},
		"beyond int64":   {"9223372036854775808", 0, "out of range"},
		"largest":        {"9223372036854775807", 1<<63 - 1, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := WholeNumber(tc.text)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tc.want || gotErr != tc.err {
				t.Errorf("WholeNumber(%q) = %d, %q; want %d, %q", tc.text, got, gotErr, tc.want, tc.err)
			}
		})
	}
}
