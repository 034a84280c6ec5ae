package fetch

import (
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	d := strings.Repeat("ab", 32)
	type result struct {
		Kind       Kind
		URL        string
		Repository string
		Digest     string
		Err        string
	}
	for name, tc := range map[string]struct {
		in   string
		want result
	}{
		"https":                 {"https://images.example/os/ubuntu.raw.zst?sig=1", result{Kind: HTTPS, URL: "https://images.example/os/ubuntu.raw.zst?sig=1"}},
		"https with port":       {"https://127.0.0.1:8443/a", result{Kind: HTTPS, URL: "https://127.0.0.1:8443/a"}},
		"oci":                   {"oci://registry.example/os/ubuntu@sha256:" + d, result{Kind: OCI, URL: "https://registry.example/v2/os/ubuntu/blobs/sha256:" + d, Repository: "os/ubuntu", Digest: d}},
		"oci with port":         {"oci://127.0.0.1:5000/a_b/c-d@sha256:" + d, result{Kind: OCI, URL: "https://127.0.0.1:5000/v2/a_b/c-d/blobs/sha256:" + d, Repository: "a_b/c-d", Digest: d}},
		"http":                  {"http://images.example/a", result{Err: "neither https:// nor oci://"}},
		"user info":             {"https://u:p@images.example/a", result{Err: "user information"}},
		"fragment":              {"https://images.example/a#x", result{Err: "fragment"}},
		"no path":               {"https://images.example/", result{Err: "no path"}},
		"no host":               {"https:///a", result{Err: "no host"}},
		"port zero":             {"https://images.example:0/a", result{Err: "port"}},
		"empty port":            {"https://images.example:/a", result{Err: "port"}},
		"space":                 {"https://images.example/a b", result{Err: "percent-encode"}},
		"too long":              {"https://images.example/" + strings.Repeat("a", 2048), result{Err: "at most 2048"}},
		"oci tag":               {"oci://registry.example/os/ubuntu:24.04", result{Err: "not pinned by digest"}},
		"oci no repository":     {"oci://registry.example", result{Err: "no repository"}},
		"oci upper-case host":   {"oci://Registry.example/a@sha256:" + d, result{Err: "lower-case host"}},
		"oci bad repository":    {"oci://registry.example/A@sha256:" + d, result{Err: "distribution grammar"}},
		"oci short digest":      {"oci://registry.example/a@sha256:abc", result{Err: "64 lower-case hex"}},
		"oci other algorithm":   {"oci://registry.example/a@sha512:" + d, result{Err: "64 lower-case hex"}},
		"oci port out of range": {"oci://registry.example:70000/a@sha256:" + d, result{Err: "port"}},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Parse(tc.in)
			var got result
			if err != nil {
				got.Err = err.Error()
				if !strings.Contains(got.Err, tc.want.Err) || tc.want.Err == "" {
					t.Errorf("error %q, want it to say %q", got.Err, tc.want.Err)
				}
				return
			}
			got = result{Kind: s.Kind, URL: s.URL.String(), Repository: s.Repository, Digest: s.Digest}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	d := strings.Repeat("0f", 32)
	for _, s := range []string{"https://a.example/b?c=d", "oci://r.example:5000/a/b@sha256:" + d, "oci://r/a@sha256:", "https://[::1]:99/x", "oci://a/b@c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		src, err := Parse(s)
		if err != nil {
			return
		}
		if src.URL == nil || src.URL.Scheme != "https" || src.URL.Host == "" {
			t.Fatalf("Parse(%q) gave a URL %v that is not https with a host", s, src.URL)
		}
		if src.Kind == OCI {
			if !proto.IsDigest(src.Digest) || !strings.HasSuffix(s, "@sha256:"+src.Digest) {
				t.Fatalf("Parse(%q) gave digest %q", s, src.Digest)
			}
			if again, err := Parse("oci://" + src.URL.Host + "/" + src.Repository + "@sha256:" + src.Digest); err != nil || again.URL.String() != src.URL.String() {
				t.Fatalf("oci source %q does not parse back the same: %v", s, err)
			}
		}
	})
}
