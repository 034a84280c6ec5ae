package image

import (
	"net/url"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

const digestA = "1b4f0e9851971998e732078544c96b36c3d01cedf7caa332359d6f1d83567014"

func TestParseSource(t *testing.T) {
	cases := map[string]struct {
		in   string
		want Source
		bad  bool
	}{
		"https":            {in: "https://images.example.com/ubuntu.raw.zst", want: Source{Scheme: "https", Host: "images.example.com", Path: "/ubuntu.raw.zst"}},
		"https port query": {in: "https://s3.example.com:8443/b/u.raw?X-Amz-Signature=ab%2Fcd&x=1", want: Source{Scheme: "https", Host: "s3.example.com:8443", Path: "/b/u.raw?X-Amz-Signature=ab%2Fcd&x=1"}},
		"https ipv6":       {in: "https://[2001:db8::1]/u.raw", want: Source{Scheme: "https", Host: "[2001:db8::1]", Path: "/u.raw"}},
		"oci":              {in: "oci://registry.example.com/os/ubuntu@sha256:" + digestA, want: Source{Scheme: "oci", Host: "registry.example.com", Path: "os/ubuntu", Digest: digestA}},
		"oci port":         {in: "oci://localhost:5000/a__b/c-d.e@sha256:" + digestA, want: Source{Scheme: "oci", Host: "localhost:5000", Path: "a__b/c-d.e", Digest: digestA}},
		"http":             {in: "http://images.example.com/u.raw", bad: true},
		"upper scheme":     {in: "HTTPS://images.example.com/u.raw", bad: true},
		"file":             {in: "file:///etc/passwd", bad: true},
		"no host":          {in: "https:///u.raw", bad: true},
		"no path":          {in: "https://images.example.com", bad: true},
		"root path":        {in: "https://images.example.com/", bad: true},
		"userinfo":         {in: "https://user:pw@images.example.com/u.raw", bad: true},
		"fragment":         {in: "https://images.example.com/u.raw#x", bad: true},
		"space":            {in: "https://images.example.com/u raw", bad: true},
		"tab":              {in: "https://images.example.com/u\traw", bad: true},
		"newline":          {in: "https://images.example.com/u.raw\n", bad: true},
		"nul":              {in: "https://images.example.com/u\x00", bad: true},
		"quote":            {in: `https://images.example.com/u"raw`, bad: true},
		"non-ascii":        {in: "https://images.example.com/ü.raw", bad: true},
		"bad escape":       {in: "https://images.example.com/u%zz", bad: true},
		"port zero":        {in: "https://images.example.com:0/u.raw", bad: true},
		"port too big":     {in: "https://images.example.com:70000/u.raw", bad: true},
		// The fetch refuses a port with a leading zero: registered, the image never fetched.
		"port leading zero":     {in: "https://images.example.com:0443/u.raw", bad: true},
		"oci port leading zero": {in: "oci://registry.example.com:05000/a@sha256:" + digestA, bad: true},
		"too long":              {in: "https://images.example.com/" + strings.Repeat("a", maxSource), bad: true},
		"oci tag":               {in: "oci://registry.example.com/os/ubuntu:24.04", bad: true},
		"oci upper repo":        {in: "oci://registry.example.com/OS/ubuntu@sha256:" + digestA, bad: true},
		"oci short digest":      {in: "oci://registry.example.com/os/ubuntu@sha256:abc", bad: true},
		"oci upper digest":      {in: "oci://registry.example.com/os/ubuntu@sha256:" + strings.ToUpper(digestA), bad: true},
		"oci other alg":         {in: "oci://registry.example.com/os/ubuntu@sha512:" + digestA, bad: true},
		"oci no repo":           {in: "oci://registry.example.com@sha256:" + digestA, bad: true},
		"oci bad separator":     {in: "oci://registry.example.com/a..b@sha256:" + digestA, bad: true},
		"oci trailing slash":    {in: "oci://registry.example.com/a/@sha256:" + digestA, bad: true},
		"oci port too big":      {in: "oci://registry.example.com:99999/a@sha256:" + digestA, bad: true},
		"empty":                 {in: "", bad: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSource(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("accepted as %+v; want INVALID_INPUT at source", got)
				}
				if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "source" {
					t.Fatalf("got %v; want INVALID_INPUT at source", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseSource(f *testing.F) {
	for _, s := range []string{"https://images.example.com/u.raw", "https://h:1/p?q=%2F", "oci://r/a@sha256:" + digestA, "https://[::1]:8443/x", "https://u@h/x", "oci://r:0/a@sha256:" + digestA} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		src, err := ParseSource(s)
		if err != nil {
			if proto.CodeOf(err) != proto.InvalidInput {
				t.Fatalf("%q: %v is not INVALID_INPUT", s, err)
			}
			return
		}
		for i := 0; i < len(s); i++ {
			if s[i] <= ' ' || s[i] >= 0x7f || s[i] == '"' || s[i] == '\\' {
				t.Fatalf("%q accepted with byte %q", s, s[i])
			}
		}
		switch src.Scheme {
		case "https":
			u, err := url.Parse(s)
			if err != nil || u.Scheme != "https" || u.User != nil || u.Host == "" {
				t.Fatalf("%q accepted as %+v", s, u)
			}
		case "oci":
			if len(src.Digest) != 64 || src.Host == "" || src.Path == "" {
				t.Fatalf("%q accepted as %+v", s, src)
			}
		default:
			t.Fatalf("%q accepted with scheme %q", s, src.Scheme)
		}
	})
}
