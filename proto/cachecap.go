package proto

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"time"
)

// A site cache URL carries a capability: `?cap=` and the capability, the query's only
// field. A capability opens one digest until its expiry; it is signed with Ed25519 by the
// registry (the key its SiteSpec's CacheKey names) or by the site agent itself, for the
// URLs it puts in boot scripts. docs/cache.md describes it.

// CacheCapQuery starts the query of a cache URL that carries a capability.
const CacheCapQuery = "cap="

// cacheCapContext starts every message a cache capability signs, so that no signature
// made for another purpose is one.
const cacheCapContext = "better-compute cache capability v1\x00"

// cacheCapBytes is a capability decoded: the expiry's Unix seconds (8 bytes, big-endian)
// and the signature.
const cacheCapBytes = 8 + ed25519.SignatureSize

// CacheCapLen is a capability's length: cacheCapBytes in unpadded base64url, 6 bits a
// character.
const CacheCapLen = (cacheCapBytes*8 + 5) / 6

// CacheCapability is a capability for digest that expires at expires, signed with key.
func CacheCapability(key ed25519.PrivateKey, digest string, expires time.Time) string {
	var b [cacheCapBytes]byte
	putExpiry(b[:8], expires)
	copy(b[8:], ed25519.Sign(key, cacheCapMessage(digest, b[:8])))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// CacheCapURL is url (a cache URL of digest) with a capability for digest that expires
// at expires, signed with key.
func CacheCapURL(url string, key ed25519.PrivateKey, digest string, expires time.Time) string {
	return url + "?" + CacheCapQuery + CacheCapability(key, digest, expires)
}

// decodeCacheCap decodes a capability into the expiry's 8 bytes and the signature; ok is
// false unless s is exactly what CacheCapability makes: CacheCapLen characters of
// unpadded base64url, in canonical form, with an expiry after the Unix epoch.
func decodeCacheCap(s string) ([]byte, bool) {
	if len(s) != CacheCapLen {
		return nil, false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != cacheCapBytes {
		return nil, false
	}
	if u := binary.BigEndian.Uint64(b[:8]); u == 0 || u > maxCacheCapExpiry {
		return nil, false
	}
	return b, true
}

// maxCacheCapExpiry bounds an expiry's Unix seconds: tens of thousands of years.
const maxCacheCapExpiry = 1 << 40

// VerifyCacheCap says whether query (a cache URL's raw query) is `cap=` and a capability
// for digest, signed by one of keys, that has not expired at now. Each key costs one
// ed25519.Verify.
func VerifyCacheCap(keys []ed25519.PublicKey, query, digest string, now time.Time) bool {
	s, ok := strings.CutPrefix(query, CacheCapQuery)
	if !ok {
		return false
	}
	b, ok := decodeCacheCap(s)
	if !ok || now.Unix() >= int64(binary.BigEndian.Uint64(b[:8])) {
		return false
	}
	msg := cacheCapMessage(digest, b[:8])
	for _, k := range keys {
		if ed25519.Verify(k, msg, b[8:]) {
			return true
		}
	}
	return false
}

// putExpiry writes expires into a capability's first 8 bytes, b.
func putExpiry(b []byte, expires time.Time) { binary.BigEndian.PutUint64(b, uint64(expires.Unix())) }

// cacheCapMessage is what a capability signs: the context, the digest and the expiry's
// 8 bytes.
func cacheCapMessage(digest string, expiry []byte) []byte {
	msg := make([]byte, 0, len(cacheCapContext)+len(digest)+1+len(expiry))
	msg = append(msg, cacheCapContext...)
	msg = append(msg, digest...)
	msg = append(msg, 0)
	return append(msg, expiry...)
}

// EncodeCacheKey is a cache capability public key as a SiteSpec's CacheKey spells it:
// standard base64.
func EncodeCacheKey(k ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(k) }

// ParseCacheKey reads a SiteSpec's CacheKey; INVALID_CONFIG at site.cacheKey unless it is
// an Ed25519 public key in standard base64.
func ParseCacheKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, Errorf(InvalidConfig, "cacheKey %q is not an Ed25519 public key in base64 (%d bytes)", s, ed25519.PublicKeySize).WithPath("site.cacheKey")
	}
	return ed25519.PublicKey(b), nil
}
