package fetch

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseChallenges(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		want []Challenge
	}{
		"docker registry": {
			`Bearer realm="https://auth.example/token",service="registry.example",scope="repository:os/ubuntu:pull"`,
			[]Challenge{{Scheme: "bearer", Params: map[string]string{"realm": "https://auth.example/token", "service": "registry.example", "scope": "repository:os/ubuntu:pull"}}},
		},
		"tokens, spaces and case": {
			`BEARER  Realm = abc , Service=x`,
			[]Challenge{{Scheme: "bearer", Params: map[string]string{"realm": "abc", "service": "x"}}},
		},
		"two challenges": {
			`Basic realm="simple", Bearer realm="https://a/t",scope="a b"`,
			[]Challenge{
				{Scheme: "basic", Params: map[string]string{"realm": "simple"}},
				{Scheme: "bearer", Params: map[string]string{"realm": "https://a/t", "scope": "a b"}},
			},
		},
		"escapes in a quoted string": {
			`Newauth realm="apps", title="Login to \"apps\""`,
			[]Challenge{{Scheme: "newauth", Params: map[string]string{"realm": "apps", "title": `Login to "apps"`}}},
		},
		"token68 then another challenge": {
			`Negotiate a87421000492aa874209af8bc028==, Bearer realm="r"`,
			[]Challenge{{Scheme: "negotiate", Params: map[string]string{}}, {Scheme: "bearer", Params: map[string]string{"realm": "r"}}},
		},
		"a scheme alone": {
			`Bearer`,
			[]Challenge{{Scheme: "bearer", Params: map[string]string{}}},
		},
		"unclosed quote keeps what came before": {
			`Bearer realm="https://a/t", scope="repo`,
			[]Challenge{{Scheme: "bearer", Params: map[string]string{"realm": "https://a/t"}}},
		},
		"empty":   {``, nil},
		"garbage": {`"quoted"`, nil},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ParseChallenges(tc.in)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseChallenges(f *testing.F) {
	for _, s := range []string{
		`Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a:pull"`,
		`Basic realm="x", Bearer realm="y"`, `Negotiate abc==`, `Bearer realm="\"`, `a=b`, `,,,`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range ParseChallenges(s) {
			if c.Scheme == "" || c.Scheme != strings.ToLower(c.Scheme) {
				t.Fatalf("scheme %q", c.Scheme)
			}
			for k := range c.Params {
				if k == "" || k != strings.ToLower(k) {
					t.Fatalf("param name %q", k)
				}
			}
		}
	})
}
