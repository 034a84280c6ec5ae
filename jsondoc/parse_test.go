package jsondoc

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var testLimits = Limits{MaxBytes: 1 << 10, MaxDepth: 4}

func TestParseAccepts(t *testing.T) {
	tests := map[string]struct {
		doc  string
		want any // the value as encoding/json decodes it
	}{
		"object":          {`{"a": 1, "b": [true, false, null], "c": "x"}`, map[string]any{"a": 1.0, "b": []any{true, false, nil}, "c": "x"}},
		"escapes":         {`"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"`, "\"\\/\b\f\n\r\té😀"},
		"numbers":         {`[0, -0, 1.5, -2e3, 1E+2, 3e-1]`, []any{0.0, 0.0, 1.5, -2000.0, 100.0, 0.3}},
		"utf-8":           {`"grüße"`, "grüße"},
		"surrounding ws":  {" \t\r\n{}\n ", map[string]any{}},
		"empty array":     {`[]`, []any{}},
		"depth at limit":  {`[[[[1]]]]`, []any{[]any{[]any{[]any{1.0}}}}},
		"empty key":       {`{"": 1}`, map[string]any{"": 1.0}},
		"escaped key":     {`{"\u0061": 1}`, map[string]any{"a": 1.0}},
		"big number kept": {`1e400`, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			v, err := Parse([]byte(tc.doc), testLimits)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if name == "big number kept" {
				if v.Kind != Number || v.Text != "1e400" {
					t.Fatalf("got %v %q, want the literal", v.Kind, v.Text)
				}
				return
			}
			if diff := cmp.Diff(tc.want, toAny(v)); diff != "" {
				t.Errorf("value (-want +got):\n%s", diff)
			}
		})
	}
}

// toAny turns a tree into what encoding/json would decode.
func toAny(v *Value) any {
	switch v.Kind {
	case Bool:
		return v.Bool
	case Number:
		var f float64
		if err := json.Unmarshal([]byte(v.Text), &f); err != nil {
			panic(err)
		}
		return f
	case String:
		return v.Text
	case Array:
		items := []any{}
		for _, it := range v.Items {
			items = append(items, toAny(it))
		}
		return items
	case Object:
		m := map[string]any{}
		for _, mb := range v.Members {
			m[mb.Key] = toAny(mb.Value)
		}
		return m
	}
	return nil
}

func TestParseRefuses(t *testing.T) {
	tests := map[string]struct {
		doc      string
		path     Path
		line     int
		column   int
		contains string
	}{
		"empty":             {``, "", 1, 1, "unexpected end of document"},
		"duplicate key":     {`{"a": 1, "b": {"c": 1, "c": 2}}`, "b.c", 1, 24, `duplicate field "c"`},
		"trailing garbage":  {`{} x`, "", 1, 4, "after the end"},
		"two documents":     {`{}{}`, "", 1, 3, "after the end"},
		"comment":           {"{\n  // no\n  \"a\": 1}", "", 2, 3, "comments are not JSON"},
		"NaN":               {`{"a": NaN}`, "a", 1, 7, "NaN"},
		"Infinity":          {`[-Infinity]`, "[0]", 1, 2, "NaN and Infinity"},
		"single quotes":     {`{'a': 1}`, "", 1, 2, "expected a field name"},
		"single quoted val": {`{"a": 'x'}`, "a", 1, 7, "double quotes"},
		"trailing comma":    {`{"a": [1, 2,]}`, "a", 1, 13, "trailing comma"},
		"trailing comma {}": {`{"a": 1,}`, "", 1, 9, "trailing comma"},
		"invalid utf-8":     {"{\"a\": \"\xff\"}", "a", 1, 8, "invalid UTF-8"},
		"bom":               {"\uFEFF{}", "", 1, 1, "byte order mark"},
		"lone surrogate":    {`["\ud800"]`, "[0]", 1, 3, "lone UTF-16 surrogate"},
		"low surrogate":     {`"\udc00"`, "", 1, 2, "lone UTF-16 surrogate"},
		"bad escape":        {`"\x"`, "", 1, 2, `unknown escape \x`},
		"short unicode":     {`"\u12"`, "", 1, 2, "four hex digits"},
		"control char":      {"\"a\tb\"", "", 1, 3, "control character"},
		"leading zero":      {`[01]`, "[0]", 1, 2, "do not start with 0"},
		"bare fraction":     {`[1.]`, "[0]", 1, 4, "after the decimal point"},
		"bare exponent":     {`[1e]`, "[0]", 1, 4, "in the exponent"},
		"plus sign":         {`[+1]`, "[0]", 1, 2, "expected a value"},
		"bare word":         {`{"a": tru}`, "a", 1, 7, `unexpected "tru"`},
		"word suffix":       {`[nullx]`, "[0]", 1, 2, `unexpected "nullx"`},
		"too deep":          {`[[[[[1]]]]]`, "[0][0][0][0]", 1, 5, "nested more than 4"},
		"too big":           {`"` + strings.Repeat("a", 1<<10) + `"`, "", 1, 1, "more than the 1024 allowed"},
		"missing colon":     {`{"a" 1}`, "a", 1, 6, "expected :"},
		"unclosed":          {`{"a": [1`, "a", 1, 9, "expected , or ]"},
		"unclosed string":   {`"abc`, "", 1, 5, "inside a string"},
		"line counting":     {"{\n\"a\":\n  \"é\" x}", "", 3, 7, "expected , or }"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), testLimits)
			if err == nil {
				t.Fatal("Parse accepted the document")
			}
			got := struct {
				Path         Path
				Line, Column int
			}{err.Path, err.Line, err.Column}
			want := struct {
				Path         Path
				Line, Column int
			}{tc.path, tc.line, tc.column}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("position (-want +got):\n%s", diff)
			}
			if !strings.Contains(err.Msg, tc.contains) {
				t.Errorf("message %q does not contain %q", err.Msg, tc.contains)
			}
		})
	}
}

func TestParseOffsets(t *testing.T) {
	doc := `{"a": [1, {"b": "x"}]}`
	v, err := Parse([]byte(doc), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	b := v.Get("a").Items[1].Get("b")
	if got := doc[b.Offset:b.End]; got != `"x"` {
		t.Errorf("b spans %q, want %q", got, `"x"`)
	}
	if got := string(v.Get("a").Raw); got != `[1, {"b": "x"}]` {
		t.Errorf("a.Raw = %q", got)
	}
	if got := v.Members[0].KeyOffset; got != 1 {
		t.Errorf("key offset %d, want 1", got)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.5e3, "x\u00e9"], "b": {"c": null}}`, `[true, false]`, `"\ud83d\ude00"`, `{"a":1,"a":2}`, `-0.0e+1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data, Limits{MaxBytes: 1 << 16, MaxDepth: 16})
		if err != nil {
			if err.Line < 1 || err.Column < 1 || err.Offset < 0 || err.Offset > len(data) {
				t.Fatalf("bad position in %v", err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("Parse accepted what encoding/json refuses: %q", data)
		}
		if string(data[v.Offset:v.End]) != string(v.Raw) {
			t.Fatalf("Raw does not match the offsets")
		}
	})
}
