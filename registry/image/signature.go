package image

import (
	"encoding/base64"
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
