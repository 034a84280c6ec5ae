package image

import (
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestParseRef(t *testing.T) {
	cases := map[string]struct {
		in   string
		want Ref
		bad  bool
	}{
		"spec example":        {in: "ubuntu-24.04-server@2026.09", want: Ref{"ubuntu-24.04-server", "2026.09"}},
		"underscores":         {in: "gpu_host@v1_2", want: Ref{"gpu_host", "v1_2"}},
		"longest":             {in: strings.Repeat("a", 128) + "@" + strings.Repeat("1", 64), want: Ref{strings.Repeat("a", 128), strings.Repeat("1", 64)}},
		"name too long":       {in: strings.Repeat("a", 129) + "@1", bad: true},
		"version too long":    {in: "a@" + strings.Repeat("1", 65), bad: true},
		"no version":          {in: "ubuntu", bad: true},
		"empty version":       {in: "ubuntu@", bad: true},
		"empty name":          {in: "@1", bad: true},
		"two ats":             {in: "a@1@2", bad: true},
		"upper case":          {in: "Ubuntu@1", bad: true},
		"leading dot":         {in: ".hidden@1", bad: true},
		"leading hyphen":      {in: "a@-1", bad: true},
		"slash":               {in: "a/b@1", bad: true},
		"space":               {in: "a b@1", bad: true},
		"newline":             {in: "a@1\n", bad: true},
		"non-ascii":           {in: "ubüntu@1", bad: true},
		"colon like a tag":    {in: "ubuntu:24.04@1", bad: true},
		"plus in the version": {in: "a@1+b", bad: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseRef(tc.in)
			if tc.bad {
				if e := proto.AsError(err); err == nil || e.Code != proto.InvalidInput || e.Details.Path != "ref" {
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

func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"ubuntu-24.04-server@2026.09", "a@1", "@", "a@@b", "A@1", "a@1\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			if proto.CodeOf(err) != proto.InvalidInput {
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

func FuzzParseUseRef(f *testing.F) {
	for _, s := range []string{"os@1", "acme/os@1", "/os@1", "Acme/os@1", "acme/b/os@1", "acme/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		owner, r, err := ParseUseRef(s)
		if err != nil {
			if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "ref" {
				t.Fatalf("%q: %v is not INVALID_INPUT at ref", s, err)
			}
			return
		}
		spelled := r.String()
		if owner != "" {
			spelled = owner + "/" + spelled
		}
		if spelled != s || strings.Count(s, "/") > 1 || owner != "" && !proto.ValidTenantName(owner) {
			t.Fatalf("%q parsed to %q / %q", s, owner, r)
		}
	})
}
