package proto

import (
	"fmt"
	"net/netip"
	"strconv"
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
		if refused, _ := (SourceBound{Site: patterns}).Refused(source); refused == want {
			t.Errorf("%s: allowed %v, want %v", source, !refused, want)
		}
	}
	if refused, _ := (SourceBound{}).Refused("https://images.example.com/os.raw"); !refused {
		t.Errorf("no pattern allowed a source")
	}
}

// TestSourceBound: a pool narrows its site's list, never widens it.
func TestSourceBound(t *testing.T) {
	b := SourceBound{Site: []string{"images.example.com", "cdn.example.com"}, Pool: []string{"images.example.com", "other.example.com"}}
	for host, want := range map[string][2]bool{
		"images.example.com": {false, false},
		"cdn.example.com":    {true, true},  // the site allows it, the pool does not
		"other.example.com":  {true, false}, // the pool's list allows nothing the site's does not
	} {
		if refused, byPool := b.HostRefused(host, "443"); refused != want[0] || byPool != want[1] {
			t.Errorf("%s: refused %v by pool %v, want %v", host, refused, byPool, want)
		}
	}
	if refused, _ := (SourceBound{Site: b.Site}).HostRefused("cdn.example.com", "443"); refused {
		t.Errorf("a pool without a list narrowed the site's")
	}
}

// TestSourceBoundAddresses: an address of the fetching machine or its link is dialed
// only when the list names it; a name may lead to any other address.
func TestSourceBoundAddresses(t *testing.T) {
	b := SourceBound{Site: []string{"images.example.com", "127.0.0.2:8443", "[fe80::1]:443"}, Pool: nil}
	for addr, want := range map[string]string{
		"127.0.0.1:443":            "loopback",
		"127.0.0.2:443":            "loopback", // listed for another port only
		"127.0.0.2:8443":           "",         // listed as itself
		"[::ffff:127.0.0.2]:8443":  "",         // the same address
		"[::ffff:127.0.0.1]:443":   "loopback",
		"[::1]:443":                "loopback",
		"169.254.169.254:443":      "link-local",
		"[fe80::2]:443":            "link-local",
		"[fe80::1]:443":            "",
		"[fe80::1%25eth0]:443":     "link-local", // a zone is another address than the pattern's
		"0.0.0.0:443":              "unspecified",
		"[::]:443":                 "unspecified",
		"0.1.2.3:443":              "this-network",
		"224.0.0.1:443":            "multicast",
		"[ff02::1]:443":            "multicast",
		"10.0.0.7:443":             "", // private ranges are where internal mirrors are
		"192.168.1.1:443":          "",
		"[fd00::7]:443":            "",
		"93.184.216.34:443":        "",
		"[2001:db8::1]:443":        "",
		"[::ffff:169.254.1.1]:443": "link-local",
	} {
		ap, err := netip.ParseAddrPort(strings.Replace(addr, "%25", "%", 1))
		if err != nil {
			t.Fatal(err)
		}
		if got := b.AddrRefused(ap); got != want {
			t.Errorf("%s: refused as %q, want %q", addr, got, want)
		}
	}
	narrowed := SourceBound{Site: b.Site, Pool: []string{"images.example.com"}}
	if got := narrowed.AddrRefused(netip.MustParseAddrPort("127.0.0.2:8443")); got != "loopback" {
		t.Errorf("an address the pool does not name: refused as %q", got)
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
			if refused, _ := (SourceBound{Site: []string{pattern}}).Refused(source); !refused {
				t.Fatalf("the refused pattern %q allows %q", pattern, source)
			}
			return
		}
		b := SourceBound{Site: []string{pattern}}
		host, port, ok := SourceHost(source)
		if ok {
			// An address of the machine or its link is reached through the pattern only
			// when it names that address.
			if a, err := netip.ParseAddr(host); err == nil {
				n, _ := strconv.Atoi(port)
				refusedAddr := b.AddrRefused(netip.AddrPortFrom(a, uint16(n))) != ""
				if refused, _ := b.Refused(source); refusedAddr && !refused {
					t.Fatalf("%q allows %q, and refuses its address", pattern, source)
				}
			}
		}
		if refused, _ := b.Refused(source); refused {
			return
		}
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

// TestIsPort: a port is 1 to 65535 as strconv.Itoa writes it, the one rule of the
// catalog, the fetch and a site's image sources.
func TestIsPort(t *testing.T) {
	for s, want := range map[string]bool{
		"1": true, "443": true, "8443": true, "65535": true,
		"": false, "0": false, "0443": false, "00": false, "+443": false, "-1": false, "65536": false, "4 43": false, "443a": false, "99999999999999999999": false,
	} {
		if got := IsPort(s); got != want {
			t.Errorf("IsPort(%q) = %v, want %v", s, got, want)
		}
	}
}
