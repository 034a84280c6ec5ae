package proto

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestNodeIDIsTheJoinRule(t *testing.T) {
	for id, ok := range map[string]bool{
		"node-1":                 true,
		"rack-a.gpu_07":          true,
		"0":                      true,
		strings.Repeat("n", 128): true,
		strings.Repeat("n", 129): false,
		"Rack:A":                 false,
		"rack:a":                 false,
		"Node-1":                 false,
		"-node":                  false,
		".node":                  false,
		"":                       false,
		"node 1":                 false,
		"node/1":                 false,
	} {
		err := CheckNodeID(id)
		if (err == nil) != ok {
			t.Errorf("CheckNodeID(%q) = %v, want accepted %v", id, err, ok)
		}
		if err != nil && CodeOf(err) != InvalidInput {
			t.Errorf("CheckNodeID(%q) = %v, want INVALID_INPUT", id, err)
		}
		spec := NodeSpec{Node: id, Role: RoleRamdisk}
		if err := spec.Validate(); (err == nil) != ok {
			t.Errorf("a NodeSpec for node %q: %v, want accepted %v", id, err, ok)
		}
	}
}

func TestCommandIDsKeepTheirShape(t *testing.T) {
	for id, ok := range map[string]bool{"wf_0123456789abcdef:main.5:a1": true, "run:steps[0]": false, "Run-1:A": true, "": false, ":a": false} {
		if err := CheckCommandID(id); (err == nil) != ok {
			t.Errorf("CheckCommandID(%q) = %v, want accepted %v", id, err, ok)
		}
	}
}

func TestParseImageRef(t *testing.T) {
	cases := map[string]struct {
		in   string
		want ImageRef
		bad  bool
	}{
		"spec example":             {in: "ubuntu-24.04-server@2026.09", want: ImageRef{Name: "ubuntu-24.04-server", Version: "2026.09"}},
		"underscores":              {in: "gpu_host@v1_2", want: ImageRef{Name: "gpu_host", Version: "v1_2"}},
		"longest":                  {in: strings.Repeat("a", 128) + "@" + strings.Repeat("1", 64), want: ImageRef{Name: strings.Repeat("a", 128), Version: strings.Repeat("1", 64)}},
		"name too long":            {in: strings.Repeat("a", 129) + "@1", bad: true},
		"version too long":         {in: "a@" + strings.Repeat("1", 65), bad: true},
		"no version":               {in: "ubuntu", bad: true},
		"empty version":            {in: "ubuntu@", bad: true},
		"empty name":               {in: "@1", bad: true},
		"two ats":                  {in: "a@1@2", bad: true},
		"upper case":               {in: "Ubuntu@1", bad: true},
		"leading dot":              {in: ".hidden@1", bad: true},
		"leading hyphen":           {in: "a@-1", bad: true},
		"slash":                    {in: "a/b@1", bad: true},
		"space":                    {in: "a b@1", bad: true},
		"newline":                  {in: "a@1\n", bad: true},
		"non-ascii":                {in: "ubüntu@1", bad: true},
		"colon like a tag":         {in: "ubuntu:24.04@1", bad: true},
		"plus in the version":      {in: "a@1+b", bad: true},
		"a profile's old spelling": {in: "os@2026.09+Build1", bad: true},
		"upper-case version":       {in: "os@2026.09-RC1", bad: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseImageRef(tc.in)
			if tc.bad {
				if e := AsError(err); err == nil || e.Code != InvalidInput || e.Details.Path != "ref" {
					t.Fatalf("got %v, want INVALID_INPUT at ref", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.String() != tc.in {
				t.Errorf("String() = %q", got.String())
			}
		})
	}
}

func FuzzParseImageRef(f *testing.F) {
	for _, s := range []string{"ubuntu-24.04-server@2026.09", "a@1", "@", "a@@b", "A@1", "a@1\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseImageRef(s)
		if err != nil {
			if CodeOf(err) != InvalidInput {
				t.Fatalf("%q: %v is not INVALID_INPUT", s, err)
			}
			return
		}
		if r.String() != s {
			t.Fatalf("%q parsed to %q", s, r)
		}
		for _, c := range s {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz0123456789._-@", c) {
				t.Fatalf("%q accepted with %q", s, c)
			}
		}
	})
}

// FuzzOperatorReason checks the reason an operator gives a request: one of at most
// MaxReason bytes of UTF-8 without control characters is taken as given ("" as "an
// operator asked"), anything else is INVALID_INPUT at reason.
func FuzzOperatorReason(f *testing.F) {
	for _, s := range []string{"", "OS compromised", "two\nlines", "\xff", strings.Repeat("x", MaxReason), strings.Repeat("é", MaxReason/2+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reason string) {
		got, err := OperatorReason(reason)
		ok := len(reason) <= MaxReason && utf8.ValidString(reason) && !strings.ContainsFunc(reason, unicode.IsControl)
		switch {
		case ok && err != nil:
			t.Fatalf("%q refused: %v", reason, err)
		case !ok && (err == nil || AsError(err).Code != InvalidInput || AsError(err).Details.Path != "reason"):
			t.Fatalf("%q: %v, want INVALID_INPUT at reason", reason, err)
		case ok && reason == "" && got != "an operator asked", ok && reason != "" && got != reason:
			t.Fatalf("%q taken as %q", reason, got)
		}
	})
}
