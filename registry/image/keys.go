package image

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"math/big"

	"github.com/better-compute/better-compute/proto"
)

// maxPublicKeyPEM bounds the PEM text of a signer's key.
const maxPublicKeyPEM = 16 << 10

// The algorithms a signer's key may have.
const (
	AlgEd25519   = "ed25519"
	AlgECDSAP256 = "ecdsa-p256"
)

// PublicKey is a signer's parsed key.
type PublicKey struct {
	// Algorithm is AlgEd25519 or AlgECDSAP256.
	Algorithm string
	// Fingerprint is "sha256/" and the base64 SHA-256 of the DER SPKI.
	Fingerprint string
	ed          ed25519.PublicKey
	ec          *ecdsa.PublicKey
}

// ParsePublicKey reads one SPKI PEM block ("PUBLIC KEY") holding an Ed25519 or ECDSA
// P-256 key. Anything else (another algorithm or curve, more than one block, text
// around it) is INVALID_INPUT at the path "publicKey".
func ParsePublicKey(pemText []byte) (PublicKey, error) {
	bad := func(format string, args ...any) (PublicKey, error) {
		return PublicKey{}, proto.Errorf(proto.InvalidInput, "public key: "+format, args...).WithPath("publicKey")
	}
	if len(pemText) > maxPublicKeyPEM {
		return bad("at most %d bytes of PEM", maxPublicKeyPEM)
	}
	block, rest := pem.Decode(pemText)
	if block == nil {
		return bad("no PEM block: give the SPKI PEM openssl writes with `openssl pkey -pubout`")
	}
	if len(bytes.TrimSpace(rest)) != 0 || bytes.Count(pemText, []byte("-----BEGIN")) != 1 || !bytes.HasPrefix(bytes.TrimSpace(pemText), []byte("-----BEGIN")) {
		return bad("give exactly one PEM block and nothing else")
	}
	if block.Type != "PUBLIC KEY" {
		return bad("the PEM block is %q; give a PUBLIC KEY (SPKI) block", block.Type)
	}
	if len(block.Headers) != 0 {
		return bad("the PEM block has headers; give a plain PUBLIC KEY block")
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return bad("%v", err)
	}
	sum := sha256.Sum256(block.Bytes)
	pk := PublicKey{Fingerprint: "sha256/" + base64.StdEncoding.EncodeToString(sum[:])}
	switch k := key.(type) {
	case ed25519.PublicKey:
		pk.Algorithm, pk.ed = AlgEd25519, k
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return bad("ECDSA on %s is not accepted: use P-256 or Ed25519", k.Curve.Params().Name)
		}
		pk.Algorithm, pk.ec = AlgECDSAP256, k
	default:
		return bad("%s keys are not accepted: use ECDSA P-256 or Ed25519", proto.KeyAlgorithm(key))
	}
	return pk, nil
}

// Verify reports whether sig is a good signature of input by this key: Ed25519, or
// ECDSA over SHA-256 as IEEE P1363 (r||s, 64 bytes) or ASN.1 DER. An ECDSA signature
// that verifies with a high S is INVALID_INPUT at the path "signature": its twin with
// n - s verifies too, and the catalog takes only the low-S one, so that a signature
// has one spelling.
func (k PublicKey) Verify(input, sig []byte) (bool, error) {
	if k.ed != nil {
		return len(sig) == ed25519.SignatureSize && ed25519.Verify(k.ed, input, sig), nil
	}
	digest := sha256.Sum256(input)
	var s *big.Int
	if len(sig) == 64 {
		r, s64 := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		if ecdsa.Verify(k.ec, digest[:], r, s64) {
			s = s64
		}
	}
	if s == nil && ecdsa.VerifyASN1(k.ec, digest[:], sig) {
		rs, ok := parseDER(sig)
		if !ok {
			return false, nil
		}
		s = rs.S
	}
	switch {
	case s == nil:
		return false, nil
	case s.Cmp(p256HalfOrder) > 0:
		return false, proto.Errorf(proto.InvalidInput, "the ECDSA signature has a high S (above half the P-256 group order), which the catalog refuses: "+
			"normalise it to low S (replace s by n - s; `better-compute images register` does this for the DER form openssl writes)").WithPath("signature")
	}
	return true, nil
}
