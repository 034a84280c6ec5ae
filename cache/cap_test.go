package cache

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// newCapKey is an Ed25519 key made from seed, so tests are repeatable.
func newCapKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

// The attacker is a machine on the provisioning network that knows a digest: with no
// capability, one for another digest, an expired one, a tampered one, one signed by a key
// the cache was not given, or one padded with a further query field, it gets 403
// FORBIDDEN, and the very same answer whether or not the cache holds the digest.
func TestServeRefusesWithoutAValidCapability(t *testing.T) {
	a := newArtifact(70, 64<<10)
	clock := newFakeClock()
	h := readyCache(t, a, Config{Clock: clock})
	key, other := newCapKey(1), newCapKey(2)
	h.c.RequireCapabilities([]ed25519.PublicKey{key.Public().(ed25519.PublicKey)})
	srv := httptest.NewServer(h.c.Handler())
	t.Cleanup(srv.Close)
	absent := strings.Repeat("ab", 32)
	now := clock.Now()
	later := now.Add(time.Hour)
	valid := proto.CacheCapability(key, a.digest, later)
	tampered := []byte(valid)
	tampered[40] ^= 'A' ^ 'B'
	if tampered[40] == valid[40] {
		tampered[40] = 'C'
	}
	for name, query := range map[string]func(digest string) string{
		"none":         func(string) string { return "" },
		"an empty one": func(string) string { return proto.CacheCapQuery },
		"another digest's": func(string) string {
			return proto.CacheCapQuery + proto.CacheCapability(key, newArtifact(71, 1).digest, later)
		},
		"expired":              func(d string) string { return proto.CacheCapQuery + proto.CacheCapability(key, d, now) },
		"expired long ago":     func(d string) string { return proto.CacheCapQuery + proto.CacheCapability(key, d, now.Add(-time.Hour)) },
		"tampered":             func(string) string { return proto.CacheCapQuery + string(tampered) },
		"another key's":        func(d string) string { return proto.CacheCapQuery + proto.CacheCapability(other, d, later) },
		"with a further field": func(d string) string { return proto.CacheCapQuery + proto.CacheCapability(key, d, later) + "&x=1" },
		"under another name":   func(d string) string { return "c=" + proto.CacheCapability(key, d, later) },
		"padded":               func(d string) string { return proto.CacheCapQuery + proto.CacheCapability(key, d, later) + "=" },
	} {
		t.Run(name, func(t *testing.T) {
			var answers []string
			for _, d := range []string{a.digest, absent} {
				for _, method := range []string{http.MethodGet, http.MethodHead} {
					u := srv.URL + ImagePathPrefix + d
					if q := query(d); q != "" {
						u += "?" + q
					}
					req, _ := http.NewRequest(method, u, nil)
					req.Header.Set("Range", "bytes=0-9")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusForbidden || resp.Header.Get("ETag") != "" {
						t.Fatalf("%s %s: %s (ETag %q), want 403 without an ETag", method, u, resp.Status, resp.Header.Get("ETag"))
					}
					if method == http.MethodGet {
						var e proto.Error
						if err := json.Unmarshal(body, &e); err != nil || e.Code != proto.Forbidden || e.Details.Reason != proto.ReasonCacheCapability {
							t.Fatalf("GET %s: %s, want FORBIDDEN with reason %s", u, body, proto.ReasonCacheCapability)
						}
						answers = append(answers, strings.ReplaceAll(string(body), d, "DIGEST"))
					}
				}
			}
			if answers[0] != answers[1] {
				t.Errorf("the answer tells a held digest from an absent one:\n%s\n%s", answers[0], answers[1])
			}
		})
	}
}

// A valid capability opens its image, whole, by a range and by HEAD, until it expires;
// a second key (the site's own) opens it as well.
func TestServeWithAValidCapability(t *testing.T) {
	a := newArtifact(72, 64<<10)
	clock := newFakeClock()
	h := readyCache(t, a, Config{Clock: clock})
	registry, site := newCapKey(3), newCapKey(4)
	h.c.RequireCapabilities([]ed25519.PublicKey{registry.Public().(ed25519.PublicKey), site.Public().(ed25519.PublicKey)})
	srv := httptest.NewServer(h.c.Handler())
	t.Cleanup(srv.Close)
	expires := clock.Now().Add(time.Minute)
	fetch := func(key ed25519.PrivateKey, method, rng string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, proto.CacheCapURL(srv.URL+ImagePathPrefix+a.digest, key, a.digest, expires), nil)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	for _, key := range []ed25519.PrivateKey{registry, site} {
		if resp, body := fetch(key, http.MethodGet, ""); resp.StatusCode != 200 || !bytes.Equal(body, a.data) {
			t.Fatalf("GET: %s, %d bytes, want 200 and the image", resp.Status, len(body))
		}
		if resp, body := fetch(key, http.MethodGet, "bytes=100-199"); resp.StatusCode != 206 || !bytes.Equal(body, a.data[100:200]) {
			t.Fatalf("GET a range: %s, want 206 and its bytes", resp.Status)
		}
		if resp, _ := fetch(key, http.MethodHead, ""); resp.StatusCode != 200 || resp.ContentLength != int64(len(a.data)) {
			t.Fatalf("HEAD: %s, length %d", resp.Status, resp.ContentLength)
		}
	}
	clock.Advance(time.Minute)
	if resp, _ := fetch(registry, http.MethodGet, ""); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET at its expiry: %s, want 403", resp.Status)
	}
}

// A cache told no keys (a site whose registry names none) serves every URL, with a
// capability or without, as before.
func TestServeWithoutKeysServesAsBefore(t *testing.T) {
	a := newArtifact(73, 4<<10)
	clock := newFakeClock()
	h := readyCache(t, a, Config{Clock: clock})
	key := newCapKey(5)
	h.c.RequireCapabilities([]ed25519.PublicKey{key.Public().(ed25519.PublicKey)})
	h.c.RequireCapabilities(nil)
	srv := httptest.NewServer(h.c.Handler())
	t.Cleanup(srv.Close)
	for _, u := range []string{srv.URL + ImagePathPrefix + a.digest, srv.URL + ImagePathPrefix + a.digest + "?cap=anything"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(body, a.data) {
			t.Fatalf("GET %s: %s, want 200 and the image", u, resp.Status)
		}
	}
}
