package labelexpr

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseAndString(t *testing.T) {
	tests := map[string]struct {
		in, want string
	}{
		"label":                {"nvswitch", "nvswitch"},
		"equal":                {"gpu.vendor=nvidia", "gpu.vendor=nvidia"},
		"not equal":            {"gpu.vendor!=amd", "gpu.vendor!=amd"},
		"negation":             {"!lab", "!lab"},
		"negated compare":      {"!gpu.vendor=amd", "!(gpu.vendor=amd)"},
		"double negation":      {"!!lab", "lab"},
		"and":                  {"a&&b", "a && b"},
		"comma":                {"a, b,c", "a && b && c"},
		"or":                   {"a||b", "a || b"},
		"precedence":           {"a || b && c", "a || b && c"},
		"grouping kept":        {"(a || b) && c", "(a || b) && c"},
		"grouping dropped":     {"(a && b) && (c)", "a && b && c"},
		"negated group":        {"!(a || b)", "!(a || b)"},
		"spaces":               {" \tgpu.vendor = nvidia\t&& x != y ", "gpu.vendor=nvidia && x!=y"},
		"quoted value":         {"model='H100 SXM'", "model='H100 SXM'"},
		"empty quoted value":   {"a=''", "a=''"},
		"quoted bare value":    {"a='b'", "a=b"},
		"value characters":     {"v=12.4+cu:x/y@z_-", "v=12.4+cu:x/y@z_-"},
		"prefixed name":        {"nvidia.com/gpu.product=H100-SXM5-80GB", "nvidia.com/gpu.product=H100-SXM5-80GB"},
		"unicode quoted":       {"site='zürich'", "site='zürich'"},
		"or inside not in and": {"x && !(a || b=c)", "x && !(a || b=c)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e, err := Parse(tc.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.in, err)
			}
			if got := e.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := map[string]struct {
		in     string
		column int
		msg    string
	}{
		"empty":              {"", 1, "empty expression"},
		"blank":              {"   ", 4, "empty expression"},
		"single ampersand":   {"a & b", 3, "write && for and"},
		"single bar":         {"a | b", 3, "write || for or"},
		"double equals":      {"a == b", 3, "write = to compare"},
		"missing value":      {"a=", 3, "expected a value"},
		"missing operand":    {"a &&", 5, "expected a label name"},
		"leading operator":   {"|| a", 1, "expected a label name"},
		"unclosed":           {"(a || b", 8, "expected ) to close the ( at column 1"},
		"unmatched":          {"a)", 2, "unmatched )"},
		"juxtaposed":         {"a b", 3, "join terms with &&"},
		"bang equals alone":  {"!=a", 1, "expected a label name"},
		"name start":         {"-a", 1, "expected a label name"},
		"unterminated":       {"a='b", 3, "unterminated quoted value"},
		"control in quotes":  {"a='b\nc'", 5, "control character"},
		"newline":            {"a\nb", 2, "join terms"},
		"bad character":      {"a=b;c", 4, `unexpected ';'`},
		"column in runes":    {"a='ü' b", 7, "join terms"},
		"too long":           {strings.Repeat("a", MaxLen+1), 1, "longer than 1024 bytes"},
		"long name":          {strings.Repeat("a", MaxNameLen+1), 1, "label name longer than 253"},
		"long value":         {"a=" + strings.Repeat("b", MaxNameLen+1), 3, "value longer than 253"},
		"too deep":           {strings.Repeat("(", MaxDepth+1) + "a" + strings.Repeat(")", MaxDepth+1), MaxDepth + 1, "nested more than 32 deep"},
		"too many negations": {strings.Repeat("!", MaxDepth+1) + "a", MaxDepth + 1, "nested more than 32 deep"},
		"invalid utf-8":      {"a='\xff'", 1, "not valid UTF-8"},
		// 601 bytes as written, 1501 with " && " for each comma.
		"canonical too long": {strings.Repeat("a,", 300) + "a", 1, "in canonical form (&& for a comma, a space either side of && and ||, !(a=b) for !a=b) it is longer than 1024 bytes"},
		// 32 deep as written, 33 with !a=b written !(a=b).
		"canonical too deep": {canonicallyDeeper(), 1, "in canonical form (&& for a comma, a space either side of && and ||, !(a=b) for !a=b) it is nested more than 32 deep"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.in)
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q) error = %v, want a *SyntaxError", tc.in, err)
			}
			if se.Column != tc.column || !strings.Contains(se.Msg, tc.msg) {
				t.Errorf("got column %d %q, want column %d containing %q", se.Column, se.Msg, tc.column, tc.msg)
			}
		})
	}
}

func TestEval(t *testing.T) {
	labels := map[string]string{
		"nvswitch":   "true",
		"gpu.vendor": "nvidia",
		"lab":        "",
		"off":        "false",
		"zero":       "0",
		"model":      "H100 SXM",
	}
	tests := map[string]bool{
		"nvswitch":                     true,
		"lab":                          true,
		"off":                          false,
		"zero":                         false,
		"absent":                       false,
		"!absent":                      true,
		"!lab":                         false,
		"gpu.vendor=nvidia":            true,
		"gpu.vendor=NVIDIA":            false,
		"gpu.vendor!=amd":              true,
		"gpu.vendor!=nvidia":           false,
		"absent!=x":                    true,
		"absent=x":                     false,
		"lab=''":                       true,
		"absent=''":                    false,
		"model='H100 SXM'":             true,
		"nvswitch && gpu.vendor=amd":   false,
		"nvswitch, gpu.vendor=nvidia":  true,
		"absent || gpu.vendor=nvidia":  true,
		"absent || off":                false,
		"!(absent || off) && nvswitch": true,
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) {
			e, err := Parse(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.Eval(labels); got != want {
				t.Errorf("Eval = %v, want %v", got, want)
			}
		})
	}
}

func TestZeroExpr(t *testing.T) {
	var e Expr
	if !e.Eval(nil) || e.String() != "" || !e.IsZero() {
		t.Errorf("zero Expr: Eval=%v String=%q IsZero=%v", e.Eval(nil), e.String(), e.IsZero())
	}
}

func TestText(t *testing.T) {
	var got struct{ When Expr }
	if err := got.When.UnmarshalText([]byte("a,b")); err != nil {
		t.Fatal(err)
	}
	want, _ := Parse("a && b")
	if diff := cmp.Diff(want, got.When); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	text, _ := got.When.MarshalText()
	if string(text) != "a && b" {
		t.Errorf("MarshalText = %q", text)
	}
	if err := got.When.UnmarshalText([]byte("a &")); err == nil {
		t.Error("UnmarshalText accepted a bad expression")
	}
}

// canonicallyDeeper is an expression nested MaxDepth deep whose canonical form is nested
// one deeper: MaxDepth-1 groups around a negated comparison.
func canonicallyDeeper() string {
	s := "!a=b"
	for range MaxDepth - 1 {
		s = "a && (b || " + s + ")"
	}
	return s
}
