package proto

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

func testCapKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

// FuzzParseCacheCap reads any query as a site cache would: whatever parses is exactly a
// capability's canonical form, and nothing the fuzzer makes verifies under a key whose
// private half it never saw, for any digest.
func FuzzParseCacheCap(f *testing.F) {
	key := testCapKey(1)
	pub := key.Public().(ed25519.PublicKey)
	digest := strings.Repeat("0f", 32)
	now := time.Unix(1_800_000_000, 0)
	valid := CacheCapability(testCapKey(2), digest, now.Add(time.Hour))
	f.Add(CacheCapQuery + valid)
	f.Add(valid)
	f.Add(CacheCapQuery + valid + "=")
	f.Add(CacheCapQuery + strings.Repeat("A", CacheCapLen))
	f.Add(CacheCapQuery + strings.Repeat("_", CacheCapLen))
	f.Add(CacheCapQuery + strings.Repeat("/", CacheCapLen))
	f.Add("")
	f.Fuzz(func(t *testing.T, query string) {
		if VerifyCacheCap([]ed25519.PublicKey{pub}, query, digest, now) {
			t.Fatalf("%q verifies without the key", query)
		}
		s, _ := strings.CutPrefix(query, CacheCapQuery)
		b, ok := decodeCacheCap(s)
		if !ok {
			return
		}
		if again := base64.RawURLEncoding.EncodeToString(b); again != s {
			t.Fatalf("%q parses, and its canonical form is %q", s, again)
		}
	})
}

// A capability opens its own digest until its expiry, under the key that signed it, and
// nothing else.
func TestCacheCapability(t *testing.T) {
	key, other := testCapKey(3), testCapKey(4)
	pub := key.Public().(ed25519.PublicKey)
	a, b := strings.Repeat("aa", 32), strings.Repeat("bb", 32)
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(time.Hour)
	q := CacheCapQuery + CacheCapability(key, a, exp)
	for name, tc := range map[string]struct {
		keys   []ed25519.PublicKey
		query  string
		digest string
		now    time.Time
		want   bool
	}{
		"valid":                    {[]ed25519.PublicKey{pub}, q, a, now, true},
		"valid, the second key":    {[]ed25519.PublicKey{other.Public().(ed25519.PublicKey), pub}, q, a, now, true},
		"another digest":           {[]ed25519.PublicKey{pub}, q, b, now, false},
		"at its expiry":            {[]ed25519.PublicKey{pub}, q, a, exp, false},
		"another key":              {[]ed25519.PublicKey{other.Public().(ed25519.PublicKey)}, q, a, now, false},
		"no keys":                  {nil, q, a, now, false},
		"no query":                 {[]ed25519.PublicKey{pub}, "", a, now, false},
		"a further field":          {[]ed25519.PublicKey{pub}, q + "&a=b", a, now, false},
		"another expiry, same sig": {[]ed25519.PublicKey{pub}, CacheCapQuery + withExpiry(t, q, exp.Add(time.Hour)), a, now, false},
	} {
		if got := VerifyCacheCap(tc.keys, tc.query, tc.digest, tc.now); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
	if _, err := ParseCacheKey(EncodeCacheKey(pub)); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCacheKey("AAAA"); CodeOf(err) != InvalidConfig {
		t.Fatalf("a short key: %v, want INVALID_CONFIG", err)
	}
}

// withExpiry is q's capability with its expiry replaced by exp, its signature kept.
func withExpiry(t *testing.T, q string, exp time.Time) string {
	b, ok := decodeCacheCap(strings.TrimPrefix(q, CacheCapQuery))
	if !ok {
		t.Fatal("the capability does not parse")
	}
	putExpiry(b[:8], exp)
	return base64.RawURLEncoding.EncodeToString(b)
}

// BenchmarkVerifyCacheCap is what each request to a cache that requires capabilities
// pays before it is served: parsing and one Ed25519 verification.
func BenchmarkVerifyCacheCap(b *testing.B) {
	key := testCapKey(5)
	keys := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	digest := strings.Repeat("cd", 32)
	now := time.Unix(1_800_000_000, 0)
	q := CacheCapQuery + CacheCapability(key, digest, now.Add(time.Hour))
	b.ReportAllocs()
	for b.Loop() {
		if !VerifyCacheCap(keys, q, digest, now) {
			b.Fatal("refused")
		}
	}
}

func TestCacheCapLen(t *testing.T) {
	if n := base64.RawURLEncoding.EncodedLen(cacheCapBytes); n != CacheCapLen {
		t.Fatalf("CacheCapLen %d, want %d", CacheCapLen, n)
	}
}
