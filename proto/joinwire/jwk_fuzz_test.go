package joinwire

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// FuzzParseJWK feeds any file to ParseJWK, as join-encryption.jwk in bcd's config
// directory: nothing may panic; a document that is not one JSON object is INVALID_INPUT,
// a key that is not X25519 is refused by its field; an accepted key is an X25519 OKP
// key that its own JWK gives back.
func FuzzParseJWK(f *testing.F) {
	key, _ := ecdh.X25519().GenerateKey(rand.Reader)
	good, _ := json.Marshal(NewJWK(key.PublicKey()))
	x := NewJWK(key.PublicKey()).X
	f.Add(good)
	for _, seed := range []string{
		`{"kty":"EC","crv":"X25519","x":"` + x + `"}`,
		`{"kty":"OKP","crv":"X25519","x":"AAAA"}`,
		`{"kty":"OKP","crv":"X25519","x":"` + x + `="}`,
		`{"kty":"OKP","crv":"X25519","x":"` + x + `","d":"AAAA"}`,
		`{"kty":"OKP","crv":"X25519","x":"AAAA","x":"` + x + `"}`,
		`{"kty":"OKP","crv":"X25519","x":"` + x + `"} {}`,
		`{"kty":"OKP","crv":"X25519","x":"` + strings.Repeat("A", 43) + `"}`,
		`null`, `[]`, `kty=OKP`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pub, err := ParseJWK(data)
		if err != nil {
			if pe, ok := proto.AsError(err), strings.HasPrefix(err.Error(), "JWK "); !ok && pe.Code != proto.InvalidInput {
				t.Fatalf("%q: %v is neither INVALID_INPUT nor the JWK's own refusal", data, err)
			}
			return
		}
		var fields map[string]any
		if json.Unmarshal(data, &fields) != nil || fields["kty"] != "OKP" || fields["crv"] != "X25519" || len(fields) != 3 {
			t.Fatalf("%q: accepted a document that is not exactly {kty OKP, crv X25519, x}", data)
		}
		again, _ := json.Marshal(NewJWK(pub))
		back, err := ParseJWK(again)
		if err != nil || !back.Equal(pub) {
			t.Fatalf("%q: the accepted key's own JWK %s does not give it back: %v", data, again, err)
		}
	})
}
