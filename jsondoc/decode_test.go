package jsondoc

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// selfDecoding decodes itself and refuses anything but "ok".
type selfDecoding struct{}

func (*selfDecoding) UnmarshalJSON(b []byte) error {
	if string(b) != `"ok"` {
		return &json.UnmarshalTypeError{Value: "number"}
	}
	return nil
}

// TestDecoder checks the one strict decoder: the first problem in document order, as a
// *proto.Error of the decoder's code, at the path of the offending field under At, and
// for a file with the name, line and column where it stands.
func TestDecoder(t *testing.T) {
	type doc struct {
		Name  string         `json:"name"`
		Count int            `json:"count"`
		Items []string       `json:"items"`
		Self  *selfDecoding  `json:"self"`
		Map   map[string]int `json:"map"`
	}
	file := Decoder{Name: "conf.json", File: true, Code: proto.InvalidConfig}
	inner := Decoder{Name: "the step's with", At: "steps[1].with"}
	for name, tc := range map[string]struct {
		d       Decoder
		data    string
		code    proto.Code
		path    string
		message string
	}{
		"ok":                 {d: file, data: `{"name": "a", "count": 2, "items": ["x"], "self": "ok", "map": {"a": 1}}`},
		"unknown field":      {d: file, data: "{\n  \"name\": \"a\",\n  \"colour\": 1\n}", code: proto.InvalidConfig, path: "colour", message: "conf.json:3:3: unknown field"},
		"field in case":      {d: file, data: `{"Name": "a"}`, code: proto.InvalidConfig, path: "Name", message: "conf.json:1:2: "},
		"duplicate key":      {d: file, data: "{\"map\": {\"a\": 1,\n \"a\": 2}}", code: proto.InvalidConfig, path: "map.a", message: "conf.json:2:2: "},
		"wrong type":         {d: file, data: `{"count": "2"}`, code: proto.InvalidConfig, path: "count", message: "conf.json:1:11: "},
		"not JSON":           {d: file, data: "{\n\"name\": 'a'}", code: proto.InvalidConfig, path: "name", message: "conf.json:2:9: not acceptable JSON"},
		"trailing data":      {d: file, data: `{} {}`, code: proto.InvalidConfig, path: ".", message: "conf.json:1:4: "},
		"file not an object": {d: file, data: `[1]`, code: proto.InvalidConfig, path: ".", message: "conf.json:1:1: "},
		"body not an object": {d: Decoder{Name: "the body"}, data: `[1]`, code: proto.InvalidInput, path: "", message: "must be an object"},
		"self decoding":      {d: file, data: `{"self": 1}`, code: proto.InvalidConfig, path: "self", message: "conf.json: self cannot be number"},
		"under At":           {d: inner, data: `{"items": [1]}`, code: proto.InvalidInput, path: "steps[1].with.items[0]"},
		"document under At":  {d: inner, data: `[]`, code: proto.InvalidInput, path: "steps[1].with"},
	} {
		t.Run(name, func(t *testing.T) {
			var v doc
			err := tc.d.Decode([]byte(tc.data), &v)
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			e, ok := errors.AsType[*proto.Error](err)
			if !ok || e.Code != tc.code || e.Details.Path != tc.path || !strings.HasPrefix(e.Message, tc.message) {
				t.Fatalf("got %v, want %s at %q starting %q", err, tc.code, tc.path, tc.message)
			}
		})
	}
}

// FuzzDecoder checks that any document is decoded or refused with a *proto.Error of the
// decoder's code whose message says where in the file, never a panic.
func FuzzDecoder(f *testing.F) {
	for _, s := range []string{`{"name": "a", "count": 2}`, "{\n\"colour\": 1}", `{"count": 1e400}`, `{"self": 2}`, "[\xff]", `{} x`} {
		f.Add([]byte(s))
	}
	d := Decoder{Name: "f.json", File: true, Code: proto.InvalidConfig, Limits: Limits{MaxBytes: 1 << 16, MaxDepth: 16}}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v struct {
			Name  string        `json:"name"`
			Count int32         `json:"count"`
			Self  *selfDecoding `json:"self"`
		}
		err := d.Decode(data, &v)
		if err == nil {
			return
		}
		if e, ok := errors.AsType[*proto.Error](err); !ok || e.Code != proto.InvalidConfig || !strings.HasPrefix(e.Message, "f.json:") {
			t.Fatalf("refused with %v", err)
		}
	})
}
