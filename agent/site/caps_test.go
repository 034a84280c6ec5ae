package site

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// Once the SiteSpec names the registry's key, the cache serves only URLs with a
// capability: the sanboot ISO's URL the site puts in the machine's entry carries one
// signed with the site's own key, which outlives a restart, and opens the ISO; the bare
// URL and one signed by a key neither side holds do not.
func TestBootEntryCacheURLsCarryTheSitesCapability(t *testing.T) {
	f := newFixture(t, redfishsim.Config{NoVirtualMedia: true})
	iso := bytes.Repeat([]byte("an ISO of acme's "), 1000)
	c, base := readyCache(t, iso, "/acme.iso")
	f.steps.holds = c.Holds
	key, err := loadOrCreateCapKey(f.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Now())
	f.entries.caps = &capSigner{key: key, clock: clk, dir: f.stateDir}
	registry, _, _ := ed25519.GenerateKey(rand.Reader)
	keys, err := f.entries.caps.applyKeys(proto.SiteSpec{CacheKey: proto.EncodeCacheKey(registry)})
	if err != nil || len(keys) != 2 {
		t.Fatalf("cache keys %v, %v: want the registry's and the site's", keys, err)
	}
	c.RequireCapabilities(keys)
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)

	digest := testkit.Digest(iso)
	if _, err := f.run(t, "media.insert", proto.MediaInsert{URL: base + "/acme.iso", Digest: digest, MACs: []string{mac}}); err != nil {
		t.Fatal(err)
	}
	hw, _ := net.ParseMAC(mac)
	e, _ := f.entries.Entry(hw)
	bare := "http://10.0.0.1:8080/images/sha256/" + digest
	query, ok := strings.CutPrefix(e.ISO, bare+"?")
	if !ok {
		t.Fatalf("sanboot ISO %q: want %s with a capability", e.ISO, bare)
	}
	own := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	if end := clk.Now().Add(bootCapLifetime); !proto.VerifyCacheCap(own, query, digest, end.Add(-time.Second)) || proto.VerifyCacheCap(own, query, digest, end) {
		t.Fatalf("capability %q: want it to last %s from when the script was rendered", query, bootCapLifetime)
	}
	other, _ := loadOrCreateCapKey(t.TempDir())
	for u, want := range map[string]int{
		srv.URL + "/images/sha256/" + digest + "?" + query:                                           200,
		srv.URL + "/images/sha256/" + digest:                                                         403,
		proto.CacheCapURL(srv.URL+"/images/sha256/"+digest, other, digest, clk.Now().Add(time.Hour)): 403,
	} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == 200 && !bytes.Equal(body, iso)) {
			t.Errorf("GET %s: %s, want %d", u, resp.Status, want)
		}
	}
	again, err := loadOrCreateCapKey(f.stateDir)
	if err != nil || !again.Equal(key) {
		t.Fatalf("the site's key after a restart: %v, want the same key", err)
	}
	restored, err := (&capSigner{key: again, dir: f.stateDir}).restoredKeys()
	if err != nil || len(restored) != 2 || !restored[0].Equal(registry) {
		t.Fatalf("the keys after a restart, before the registry is reached: %v, %v; want the registry's and the site's", restored, err)
	}
}

// A SiteSpec without a key (a registry of an earlier version) leaves the cache serving
// every URL, also after a restart; one whose key does not parse is INVALID_CONFIG and
// leaves only the site's own key, so the cache serves no URL the registry signed.
func TestCacheKeysFromTheSiteSpec(t *testing.T) {
	dir := t.TempDir()
	key, err := loadOrCreateCapKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := &capSigner{key: key, clock: clock.Real{}, dir: dir}
	registry, _, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := s.applyKeys(proto.SiteSpec{CacheKey: proto.EncodeCacheKey(registry)}); err != nil {
		t.Fatal(err)
	}
	if keys, err := s.applyKeys(proto.SiteSpec{}); keys != nil || err != nil {
		t.Fatalf("no key: %v, %v; want none, so the cache serves as before", keys, err)
	}
	if keys, err := s.restoredKeys(); keys != nil || err != nil {
		t.Fatalf("no key, after a restart: %v, %v; want none", keys, err)
	}
	keys, err := s.applyKeys(proto.SiteSpec{CacheKey: "not a key"})
	if proto.CodeOf(err) != proto.InvalidConfig || len(keys) != 1 || !keys[0].Equal(key.Public()) {
		t.Fatalf("a bad key: %v, %v; want INVALID_CONFIG and the site's key alone", keys, err)
	}
}
