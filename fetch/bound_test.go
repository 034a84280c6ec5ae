package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/fetch/fetchtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestBoundKeepsEveryHopOnTheImageSources: a source the site allows answers the fetch
// as a hostile or careless host would, sending it on to a host inside the platform's
// network that the site does not allow (another port of loopback here): by a redirect, by
// the realm of an OCI registry's token challenge, or by a name the site allows that
// resolves to a loopback address. A bounded client makes no connection there and says
// what it refused; where the hop is allowed (the source's own host, a listed storage host
// or token server, an address the list names itself), it fetches.
func TestBoundKeepsEveryHopOnTheImageSources(t *testing.T) {
	const data = "the image's bytes"
	sum := sha256.Sum256([]byte(data))
	digest := hex.EncodeToString(sum[:])
	blob := "/v2/os/ubuntu/blobs/sha256:" + digest
	// internal serves the image, and a token, to whoever connects: on main, a fetch sent
	// here succeeded.
	internal := fetchtest.NewCounted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			io.WriteString(w, `{"token": "t"}`)
			return
		}
		io.WriteString(w, data)
	}))
	resolver := fetchtest.NewResolver(t, map[string][]netip.Addr{
		"mirror.example.com": {netip.MustParseAddr("127.0.0.1")},
		"cdn.example.com":    {netip.MustParseAddr("127.0.0.1")},
	})
	redirectTo := func(target string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, target, http.StatusFound) }
	}
	realmAt := func(realm string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer t" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`",service="s"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			io.WriteString(w, data)
		}
	}
	for name, tc := range map[string]struct {
		// serve is the allowed source's answer; source its URL on the server (oci:// for
		// an OCI source); sources and pool the bound's patterns, given the source's
		// HOST:PORT and internal's.
		serve   func(src *fetchtest.Counted) http.HandlerFunc
		oci     bool
		named   string // the source's host name instead of its address
		sources func(src, in *fetchtest.Counted) []string
		pool    func(src, in *fetchtest.Counted) []string
		// want is the refusal (zero: the fetch succeeds); internalConns whether internal
		// is connected to.
		want     RefusedError
		internal bool
	}{
		"a redirect to another port": {
			serve: func(*fetchtest.Counted) http.HandlerFunc {
				return redirectTo(internal.URL + "/admin/export?sig=secret")
			},
			sources: func(src, in *fetchtest.Counted) []string { return []string{src.Host()} },
			want:    RefusedError{Hop: HopRedirect, Host: "127.0.0.1", Port: internal.Port()},
		},
		"a redirect to the source's own host and port": {
			serve: func(*fetchtest.Counted) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/storage" {
						io.WriteString(w, data)
						return
					}
					http.Redirect(w, r, "/storage", http.StatusFound)
				}
			},
			sources: func(src, in *fetchtest.Counted) []string { return []string{src.Host()} },
		},
		"a redirect to a listed storage host": {
			serve:    func(*fetchtest.Counted) http.HandlerFunc { return redirectTo(internal.URL + "/blob") },
			sources:  func(src, in *fetchtest.Counted) []string { return []string{src.Host(), in.Host()} },
			internal: true,
		},
		"a redirect the pool leaves out": {
			serve:   func(*fetchtest.Counted) http.HandlerFunc { return redirectTo(internal.URL + "/blob") },
			sources: func(src, in *fetchtest.Counted) []string { return []string{src.Host(), in.Host()} },
			pool:    func(src, in *fetchtest.Counted) []string { return []string{src.Host()} },
			want:    RefusedError{Hop: HopRedirect, Host: "127.0.0.1", Port: internal.Port(), ByPool: true},
		},
		"a token realm on another port": {
			serve:   func(*fetchtest.Counted) http.HandlerFunc { return realmAt(internal.URL + "/token") },
			oci:     true,
			sources: func(src, in *fetchtest.Counted) []string { return []string{src.Host()} },
			want:    RefusedError{Hop: HopRealm, Host: "127.0.0.1", Port: internal.Port()},
		},
		"a token realm on a listed host": {
			serve:    func(*fetchtest.Counted) http.HandlerFunc { return realmAt(internal.URL + "/token") },
			oci:      true,
			sources:  func(src, in *fetchtest.Counted) []string { return []string{src.Host(), in.Host()} },
			internal: true,
		},
		"a name that resolves to loopback": {
			serve: func(*fetchtest.Counted) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, data) }
			},
			named:   "mirror.example.com",
			sources: func(src, in *fetchtest.Counted) []string { return []string{"mirror.example.com:" + src.Port()} },
			want:    RefusedError{Hop: HopAddress, Host: "mirror.example.com", Kind: "loopback"},
		},
		"a name that resolves to an address the list names": {
			serve: func(*fetchtest.Counted) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, data) }
			},
			named: "mirror.example.com",
			sources: func(src, in *fetchtest.Counted) []string {
				return []string{"mirror.example.com:" + src.Port(), src.Host()}
			},
		},
		"a redirect to a listed name that resolves to loopback": {
			serve: func(*fetchtest.Counted) http.HandlerFunc {
				return redirectTo("https://cdn.example.com:" + internal.Port() + "/blob")
			},
			sources: func(src, in *fetchtest.Counted) []string {
				return []string{src.Host(), "cdn.example.com:" + internal.Port()}
			},
			want: RefusedError{Hop: HopAddress, Host: "cdn.example.com", Kind: "loopback"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			before := internal.Conns()
			var src *fetchtest.Counted
			src = fetchtest.NewCounted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.serve(src)(w, r) }))
			b := Bound{Sources: proto.SourceBound{Site: tc.sources(src, internal)}, Resolver: resolver}
			if tc.pool != nil {
				b.Sources.Pool = tc.pool(src, internal)
			}
			host := src.Host()
			if tc.named != "" {
				host = tc.named + ":" + src.Port()
			}
			raw := "https://" + host + "/os.raw"
			if tc.oci {
				raw = "oci://" + host + "/os/ubuntu@sha256:" + digest
			}
			s, err := Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if s.Kind == OCI && s.URL.Path != blob {
				t.Fatalf("blob path %s", s.URL.Path)
			}
			c := NewBoundClient(src.Client().Transport.(*http.Transport), b)
			defer c.CloseIdleConnections()
			body, err := c.Open(context.Background(), s, 0, "")
			var got RefusedError
			if err == nil {
				read, _ := io.ReadAll(body)
				body.Close()
				if string(read) != data {
					t.Errorf("read %q", read)
				}
			} else {
				var r *RefusedError
				if !errors.As(err, &r) || !errors.Is(err, ErrNotAllowed) {
					t.Fatalf("%v: want a refusal", err)
				}
				got = *r
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("the refusal shows the redirect's query: %v", err)
				}
				for _, want := range []string{"refused", got.Host} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the refusal does not say %q: %v", want, err)
					}
				}
			}
			if got.Hop == HopAddress {
				// The address refused is the one the name resolved to, with the request's port.
				if got.Addr.Addr() != netip.MustParseAddr("127.0.0.1") || got.Port != fmt.Sprint(got.Addr.Port()) {
					t.Errorf("refused address %s for port %s, want 127.0.0.1 and the request's port", got.Addr, got.Port)
				}
				got.Port = ""
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(RefusedError{}, "Addr")); diff != "" {
				t.Errorf("refusal (-want +got):\n%s\nerror: %v", diff, err)
			}
			if conns := internal.Conns() - before; (conns > 0) != tc.internal {
				t.Errorf("%d connections to the host the source sent the fetch on to", conns)
			}
			if tc.named != "" && tc.want.Hop != "" && src.Conns() != 0 {
				t.Errorf("%d connections to the loopback address the name resolved to", src.Conns())
			}
		})
	}
}

// TestBoundRefusesTheSourceItself: a source the bound does not allow is not asked at all.
func TestBoundRefusesTheSourceItself(t *testing.T) {
	src := fetchtest.NewCounted(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "x") }))
	s, err := Parse(src.URL + "/os.raw")
	if err != nil {
		t.Fatal(err)
	}
	c := NewBoundClient(src.Client().Transport.(*http.Transport), Bound{Sources: proto.SourceBound{Site: []string{"images.example.com"}}})
	_, err = c.Open(context.Background(), s, 0, "")
	want := fmt.Sprintf("GET %s/os.raw: refused to fetch from host %s, which is not among the site's image sources", src.URL, src.Host())
	if !errors.Is(err, ErrNotAllowed) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want %s...", err, want)
	}
	if src.Conns() != 0 {
		t.Errorf("%d connections to the source", src.Conns())
	}
}

// FuzzBoundCheck: whatever a source answers as a redirect's Location or a token realm, a
// request is let through only to a host and port the bound allows as a source of its own,
// so no spelling of a URL reaches a host the site's list does not name.
func FuzzBoundCheck(f *testing.F) {
	for _, s := range [][2]string{
		{"images.example.com", "https://images.example.com/blob"},
		{"127.0.0.2:8443", "https://127.0.0.2:8443/x"},
		{"*.corp.example", "https://A.Corp.Example./x"},
		{"[::1]:9443", "https://[::ffff:127.0.0.1]:9443/x"},
		{"images.example.com", "https://images.example.com@127.0.0.1/x"},
		{"images.example.com", "http://images.example.com:443/x"},
		{"images.example.com", "//images.example.com%2f@127.0.0.1/"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, location string) {
		u, err := url.Parse(location)
		if err != nil {
			return
		}
		b := Bound{Sources: proto.SourceBound{Site: []string{pattern}}}
		if b.check(u, HopRedirect) != nil {
			return
		}
		host, port := proto.URLHostPort(u)
		if refused, _ := b.Sources.Refused("https://" + net.JoinHostPort(host, port) + "/"); refused {
			t.Fatalf("%q lets a request to %q (host %q, port %s) through, and refuses that host as a source", pattern, location, host, port)
		}
	})
}
