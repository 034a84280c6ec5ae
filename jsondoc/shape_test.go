package jsondoc

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

type shapePage struct {
	Cursor string `json:"cursor,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// shapedSelf decodes itself, from a string alone, and says so (Shaper).
type shapedSelf struct{ s string }

func (s *shapedSelf) UnmarshalJSON(data []byte) error { return json.Unmarshal(data, &s.s) }

func (shapedSelf) ShapeJSON(r *Report, v *Value, p Path) { r.String(v, p) }

type shapeRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	shapePage
	Actions  []string          `json:"actions"`
	Labels   map[string]string `json:"labels"`
	Value    []byte            `json:"value"`
	Small    int8              `json:"small"`
	Count    uint16            `json:"count"`
	Ratio    float64           `json:"ratio"`
	On       *bool             `json:"on"`
	At       time.Time         `json:"at"`
	Addr     netip.Addr        `json:"addr"`
	Raw      json.RawMessage   `json:"raw"`
	Any      any               `json:"any"`
	Nested   []shapePage       `json:"nested"`
	Shaped   shapedSelf        `json:"shaped"`
	Ignored  string            `json:"-"`
	GoName   string
	internal string
}

func TestShape(t *testing.T) {
	tests := map[string]struct {
		doc, path, message string
	}{
		"every field": {`{"tenantId":"a","cursor":"c","limit":5,"actions":["x"],"labels":{"k":"v"},"value":"aGk=","small":-128,
			"count":65535,"ratio":0.5,"on":true,"at":"2026-01-01T00:00:00Z","addr":"127.0.0.1","raw":{"any":[1]},"any":[{}],
			"nested":[{"cursor":"d"}],"shaped":"s","GoName":"g"}`, "", ""},
		"nulls":                     {`{"tenantId":null,"actions":null,"on":null,"nested":[null]}`, "", ""},
		"case of a field":           {`{"TenantID":"a"}`, "TenantID", `unknown field "TenantID": names are case-sensitive, write "tenantId"`},
		"case of an embedded":       {`{"Cursor":"a"}`, "Cursor", `unknown field "Cursor": names are case-sensitive, write "cursor"`},
		"case of a Go name":         {`{"goname":"a"}`, "goname", `write "GoName"`},
		"case deep inside":          {`{"nested":[{"cursor":"a"},{"LIMIT":1}]}`, "nested[1].LIMIT", `write "limit"`},
		"unknown field":             {`{"owner":"a"}`, "owner", `unknown field "owner"; the fields are "GoName", "actions"`},
		"a tag of -":                {`{"Ignored":"a"}`, "Ignored", `unknown field "Ignored"`},
		"an unexported field":       {`{"internal":"a"}`, "internal", `unknown field "internal"`},
		"a string as a number":      {`{"tenantId":7}`, "tenantId", "must be a string, not a number"},
		"an item":                   {`{"actions":["a",1]}`, "actions[1]", "must be a string, not a number"},
		"a map value":               {`{"labels":{"k":true}}`, "labels.k", "must be a string, not a boolean"},
		"an object for a slice":     {`{"actions":{}}`, "actions", "must be an array, not an object"},
		"bytes as an array":         {`{"value":[104,105]}`, "value", "must be a string, not an array"},
		"int8 out of range":         {`{"small":128}`, "small", "128 is not a whole number from -128 to 127"},
		"a negative uint":           {`{"count":-1}`, "count", "-1 is not a whole number from 0 to 65535"},
		"a fraction for an int":     {`{"limit":1.5}`, "limit", "write it without a fraction or an exponent"},
		"a float too large":         {`{"ratio":1e400}`, "ratio", "1e400 is out of range"},
		"a float too large in any":  {`{"any":{"a":[1e400]}}`, "any.a[0]", "1e400 is out of range"},
		"a time as an array":        {`{"at":[0]}`, "at", "must be a string, not an array"},
		"bytes not base64":          {`{"value":"!!"}`, "value", "must be the standard base64"},
		"a text type":               {`{"addr":1}`, "addr", "must be a string, not a number"},
		"a time not RFC 3339":       {`{"at":"yesterday"}`, "at", `cannot be read: parsing time "yesterday"`},
		"an address of three bytes": {`{"addr":"10.0.0"}`, "addr", `cannot be read: ParseAddr("10.0.0")`},
		"a type that shapes itself": {`{"nested":[],"shaped":{"s":"a"}}`, "shaped", "must be a string, not an object"},
		"not an object":             {`[]`, "", "must be an object, not an array"},
		"a long key":                {`{"` + strings.Repeat("k", 5000) + `":1}`, strings.Repeat("k", 5000), `unknown field "` + strings.Repeat("k", 128) + `…"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			v, err := Parse([]byte(tc.doc), Limits{MaxBytes: 1 << 16, MaxDepth: 8})
			if err != nil {
				t.Fatal(err)
			}
			var r Report
			r.Shape(v, "", reflect.TypeFor[*shapeRequest]())
			if tc.message == "" {
				if r.Len() != 0 {
					t.Fatalf("problems: %+v", r.Problems())
				}
				var req shapeRequest
				if err := json.Unmarshal([]byte(tc.doc), &req); err != nil {
					t.Fatalf("encoding/json refuses what Shape accepts: %v", err)
				}
				return
			}
			if r.Len() == 0 {
				t.Fatal("no problem")
			}
			first := r.Problems()[0]
			if first.Path != Path(tc.path) || !strings.Contains(first.Message, tc.message) {
				t.Errorf("problem at %.40s: %.300s; want at %.40s: %.300s", first.Path, first.Message, tc.path, tc.message)
			}
		})
	}
}

// FuzzShape checks that what Shape accepts encoding/json decodes, a text type's values
// too, and that no message is long.
func FuzzShape(f *testing.F) {
	for _, s := range []string{`{"tenantId":"a","limit":3,"actions":["x"],"labels":{"k":"v"},"nested":[{"cursor":"c"}]}`,
		`{"TenantID":"a"}`, `{"small":127,"count":0,"ratio":1e3,"any":[1e99],"value":"aGk="}`, `{"at":"2026-01-01T00:00:00Z","raw":[1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data, Limits{MaxBytes: 1 << 16, MaxDepth: 16})
		if err != nil {
			return
		}
		var r Report
		r.Shape(v, "", reflect.TypeFor[shapeRequest]())
		for _, p := range r.Problems() {
			if len(p.Message) > 1024 {
				t.Fatalf("a message of %d bytes", len(p.Message))
			}
		}
		if r.Len() > 0 {
			return
		}
		var req shapeRequest
		if err := json.Unmarshal(data, &req); err != nil {
			t.Fatalf("encoding/json refuses what Shape accepts: %v", err)
		}
	})
}
