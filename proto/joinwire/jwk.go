package joinwire

import (
	"crypto/ecdh"
	"encoding/base64"
	"fmt"

	"github.com/better-compute/better-compute/jsondoc"
)

// JWK is an X25519 public key as a JSON Web Key (RFC 8037):
// {"kty":"OKP","crv":"X25519","x":"<base64url, no padding, 32 bytes>"}.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
}

// NewJWK is the JWK of an X25519 public key.
func NewJWK(pub *ecdh.PublicKey) JWK {
	return JWK{Kty: "OKP", Crv: "X25519", X: base64.RawURLEncoding.EncodeToString(pub.Bytes())}
}

// PublicKey decodes the key, refusing anything but an X25519 OKP key.
func (j JWK) PublicKey() (*ecdh.PublicKey, error) {
	if j.Kty != "OKP" || j.Crv != "X25519" {
		return nil, fmt.Errorf("JWK is kty %q crv %q; the join encryption key is kty OKP crv X25519", j.Kty, j.Crv)
	}
	raw, err := base64.RawURLEncoding.DecodeString(j.X)
	if err != nil {
		return nil, fmt.Errorf("JWK x: %v", err)
	}
	pub, err := ecdh.X25519().NewPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("JWK x: %v", err)
	}
	return pub, nil
}

// ParseJWK reads a JWK file such as join-encryption.jwk: one JSON object with exactly
// the fields kty, crv and x. A document that is not one is INVALID_INPUT at the
// offending field (jsondoc's strict decoding).
func ParseJWK(data []byte) (*ecdh.PublicKey, error) {
	var j JWK
	if err := (jsondoc.Decoder{Name: "the JWK"}).Decode(data, &j); err != nil {
		return nil, err
	}
	return j.PublicKey()
}
