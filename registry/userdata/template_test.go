package userdata

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/google/go-cmp/cmp"
)

func TestTextTemplate(t *testing.T) {
	cases := map[string]struct {
		text string
		pins joinwire.Pins
		want string
		err  proto.Code // of ParseTemplate or Render
	}{
		"no placeholder":      {text: "plain\n", want: "plain\n"},
		"empty":               {text: "", want: ""},
		"every variable":      {text: "{{nodeId}} {{hostname}} {{joinToken}} {{controlPlaneUrl}} {{bcdUrl}} {{bcdSha256}} {{servingCaPin}} {{joinSigningPin}} {{joinEncryptionPin}}", pins: testPins, want: "gpu_node-01 gpu-node-01 bcj_0123456789abcdef.c2VjcmV0LXRva2VuLWJ5dGVzLWZvci10aGUtZ29sZGVu https://registry.example:7443 https://cache.example/bcd/v1.2.0/bcd?X-Amz-Credential=AKIA%2F20260901&X-Amz-Signature=0a1b2c 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 " + testPins.ServingCA + " " + testPins.JoinSigning + " " + testPins.JoinEncryption},
		"spaces inside":       {text: "name: {{ hostname }}\n", want: "name: gpu-node-01\n"},
		"adjacent":            {text: "{{nodeId}}{{nodeId}}", want: "gpu_node-01gpu_node-01"},
		"stray closing":       {text: "a }} b", want: "a }} b"},
		"extra closing brace": {text: "{{nodeId}}}", want: "gpu_node-01}"},
		"single brace":        {text: "{nodeId}", want: "{nodeId}"},
		"pin without pins":    {text: "pin: {{servingCaPin}}", err: proto.InvalidConfig},
		"unknown name":        {text: "{{nodeid}}", err: proto.InvalidConfig},
		"empty name":          {text: "{{}}", err: proto.InvalidConfig},
		"triple braces":       {text: "{{{nodeId}}}", err: proto.InvalidConfig},
		"unclosed":            {text: "a {{nodeId", err: proto.InvalidConfig},
		"closed on next line": {text: "a {{nodeId\n}}", err: proto.InvalidConfig},
		"helper call":         {text: "{{#if nodeId}}", err: proto.InvalidConfig},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tmpl, err := ParseTemplate(tc.text)
			var got []byte
			if err == nil {
				got, err = tmpl.Render(testVars(tc.pins))
			}
			if tc.err != "" {
				if proto.CodeOf(err) != tc.err {
					t.Fatalf("err = %v, want %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("rendered (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVarsAreSingleLines(t *testing.T) {
	cases := map[string]struct {
		value string
		ok    bool
	}{
		"plain":          {"https://x.example/a?b=c&d=%2F", true},
		"non-ascii":      {"ü→🙂", true},
		"quotes":         {`'"`, true},
		"newline":        {"a\nb", false},
		"carriage":       {"a\rb", false},
		"tab":            {"a\tb", false},
		"nul":            {"a\x00b", false},
		"del":            {"a\x7fb", false},
		"nel":            {"a\u0085b", false},
		"line sep":       {"a\u2028b", false},
		"paragraph sep":  {"a\u2029b", false},
		"placeholder":    {"{{nodeId}}", false},
		"invalid utf-8":  {"a\xffb", false},
		"single braces":  {"{a}", true},
		"closing braces": {"}}", true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for _, field := range VarNames {
				err := withVar(testVars(testPins), field, tc.value).check()
				if tc.ok != (err == nil) {
					t.Fatalf("%s: err = %v, want ok %v", field, err, tc.ok)
				}
				if tc.ok {
					continue
				}
				if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != field {
					t.Fatalf("%s: err = %v, want INVALID_CONFIG at %s", field, err, field)
				}
			}
		})
	}
}
