package proto

import (
	"fmt"
	"strings"
	"testing"
)

func TestImageSourceAllowed(t *testing.T) {
	patterns := []string{"images.example.com", "*.corp.example", "127.0.0.2:8443", "[::1]:9443", "mirror.example.com:5000"}
	for source, want := range map[string]bool{
		"https://images.example.com/os.raw":                                  true,
		"https://IMAGES.example.com:443/os.raw":                              true,
		"https://images.example.com:8443/os.raw":                             false, // another port than the pattern's 443
		"https://a.corp.example/os.raw":                                      true,
		"https://a.b.corp.example/os.raw":                                    true,
		"https://corp.example/os.raw":                                        false, // *.corp.example is below it only
		"https://evilcorp.example/os.raw":                                    false,
		"https://corp.example.evil.com/os.raw":                               false,
		"https://127.0.0.2:8443/os.raw":                                      true,
		"https://127.0.0.2/os.raw":                                           false,
		"https://127.0.0.1:8443/os.raw":                                      false,
		"https://[::1]:9443/os.raw":                                          true,
		"https://[0:0::1]:9443/os.raw":                                       true,
		"https://[::ffff:127.0.0.2]:8443/os.raw":                             true, // the same address as 127.0.0.2
		"oci://mirror.example.com:5000/os@sha256:" + strings.Repeat("a", 64): true,
		"oci://mirror.example.com/os@sha256:" + strings.Repeat("a", 64):      false,
		"http://images.example.com/os.raw":                                   false,
		"https://images.example.com.evil.com/os.raw":                         false,
		"https://images.example.com./os.raw":                                 false,
		"https://user@images.example.com@evil.com/os.raw":                    false,
		"not a url": false,
	} {
		if got := ImageSourceAllowed(patterns, source); got != want {
			t.Errorf("%s: allowed %v, want %v", source, got, want)
		}
	}
	if ImageSourceAllowed(nil, "https://images.example.com/os.raw") {
		t.Errorf("no pattern allowed a source")
	}
}

func TestCheckImageSources(t *testing.T) {
	if err := CheckImageSources([]string{"images.example.com", "*.corp.example:8443", "10.0.0.1", "[fd00::1]:443", "a"}, "imageSources"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "*", "*.", "Images.example.com", "images.example.com:0", "images.example.com:65536", "images.example.com:",
		"images.example.com:08443", "https://images.example.com", "images.example.com/os", "::1", "[::1", "[127.0.0.1]", "[::1]x", "*.*.example",
		"a.*.example", "-a.example", "a_b.example", "images.example.com:443:1", "[fe80::1%eth0]"} {
		err := CheckImageSources([]string{"ok.example", bad}, "imageSources")
		if e := AsError(err); err == nil || e.Code != InvalidInput || e.Details.Path != "imageSources[1]" {
			t.Errorf("%q: %v, want INVALID_INPUT at imageSources[1]", bad, err)
		}
	}
	if e := AsError(CheckImageSources([]string{"a.example", "a.example"}, "p")); e == nil || e.Details.Path != "p[1]" {
		t.Errorf("a pattern twice: %v", e)
	}
	many := make([]string, MaxImageSources+1)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.example", i)
	}
	if e := AsError(CheckImageSources(many, "p")); e == nil || e.Details.Path != "p" {
		t.Errorf("too many patterns: %v", e)
	}
}

func FuzzImageSources(f *testing.F) {
	for _, s := range []string{"images.example.com", "*.corp.example:8443", "127.0.0.2:8443", "[::1]:9443", "[::1", "a:"} {
		f.Add(s, "https://images.example.com/os.raw")
	}
	f.Fuzz(func(t *testing.T, pattern, source string) {
		err := CheckImageSources([]string{pattern}, "p")
		if err != nil {
			if e := AsError(err); e.Code != InvalidInput || e.Details.Path != "p[0]" {
				t.Fatalf("%q: %v", pattern, err)
			}
			if ImageSourceAllowed([]string{pattern}, source) {
				t.Fatalf("the refused pattern %q allows %q", pattern, source)
			}
			return
		}
		if !ImageSourceAllowed([]string{pattern}, source) {
			return
		}
		host, port, ok := SourceHost(source)
		if !ok || host == "" || port == "" {
			t.Fatalf("%q allows %q, which names no host", pattern, source)
		}
		// A pattern without a wildcard allows only its own host.
		if !strings.HasPrefix(pattern, "*.") {
			p, _ := parseSourcePattern(pattern)
			if p.name != "" && host != p.name {
				t.Fatalf("%q allows the host %q", pattern, host)
			}
		}
	})
}
