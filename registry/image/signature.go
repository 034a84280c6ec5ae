package image

import (
	"crypto/elliptic"
	"encoding/asn1"
	"encoding/base64"
	"math/big"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// The decoded size a signature may have: Ed25519 and ECDSA P1363 signatures are 64
// bytes, DER-encoded ECDSA P-256 ones 8 to 72.
const (
	minSignature = 8
	maxSignature = 72
)

// DecodeSignature reads a signature in standard base64, with or without padding.
// Anything else is INVALID_INPUT at the path "signature".
func DecodeSignature(s string) ([]byte, error) {
	if len(s) > base64.StdEncoding.EncodedLen(maxSignature) {
		return nil, proto.Errorf(proto.InvalidInput, "signature: longer than any Ed25519 or ECDSA P-256 signature").WithPath("signature")
	}
	enc := base64.RawStdEncoding
	if strings.HasSuffix(s, "=") {
		enc = base64.StdEncoding
	}
	sig, err := enc.Strict().DecodeString(s)
	// The decoder skips line breaks; a signature is one line.
	if err != nil || strings.ContainsAny(s, "\r\n") {
		return nil, proto.Errorf(proto.InvalidInput, "signature: not standard base64 (openssl base64 -A writes it)").WithPath("signature")
	}
	if len(sig) < minSignature || len(sig) > maxSignature {
		return nil, proto.Errorf(proto.InvalidInput, "signature: %d bytes, which is no Ed25519 or ECDSA P-256 signature", len(sig)).WithPath("signature")
	}
	return sig, nil
}

// encodeSignature is the form the catalog keeps a signature in: padded standard base64.
func encodeSignature(sig []byte) string { return base64.StdEncoding.EncodeToString(sig) }

// p256Order is n, the order of P-256; p256HalfOrder is n/2. An ECDSA signature (r, s)
// verifies as (r, n - s) too: the catalog takes only the low-S one, s at most n/2.
var (
	p256Order     = elliptic.P256().Params().N
	p256HalfOrder = new(big.Int).Rsh(p256Order, 1)
)

// derSignature is an ECDSA signature in ASN.1 DER: SEQUENCE { r INTEGER, s INTEGER }.
type derSignature struct{ R, S *big.Int }

// parseDER reads a DER ECDSA P-256 signature: both numbers from 1 to n - 1, nothing
// after them.
func parseDER(sig []byte) (derSignature, bool) {
	var rs derSignature
	rest, err := asn1.Unmarshal(sig, &rs)
	ok := err == nil && len(rest) == 0 &&
		rs.R.Sign() > 0 && rs.R.Cmp(p256Order) < 0 && rs.S.Sign() > 0 && rs.S.Cmp(p256Order) < 0
	return rs, ok
}

// LowS returns a DER ECDSA P-256 signature with a high S as its low-S twin (s replaced
// by n - s, encoded again), the form the catalog takes; anything else (low S already,
// Ed25519, P1363, not a signature) it returns as it is. openssl dgst -sign writes
// either S; `images register` sends what LowS makes of it.
func LowS(sig []byte) []byte {
	rs, ok := parseDER(sig)
	if !ok || rs.S.Cmp(p256HalfOrder) <= 0 {
		return sig
	}
	rs.S.Sub(p256Order, rs.S)
	out, err := asn1.Marshal(rs)
	if err != nil {
		return sig
	}
	return out
}
