package joinwire

import (
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"strings"
)

// Pins are the three trust anchors bcd checks the registry against: the serving CA,
// the key that signs JoinResponses, and the JoinService key tokens are sealed to. The
// registry writes them to DATA_DIR/pins.json in this JSON shape.
type Pins struct {
	ServingCA      string `json:"servingCaPin"`
	JoinSigning    string `json:"joinSigningPin"`
	JoinEncryption string `json:"joinEncryptionPin"`
}

// pinPrefix starts every pin: the digest it carries.
const pinPrefix = "sha256/"

// Pin is the pin of a public key: "sha256/" and the standard base64 of the SHA-256 of
// its SubjectPublicKeyInfo DER. An X25519 key is pinned as its *ecdh.PublicKey.
func Pin(pub crypto.PublicKey) (string, error) {
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(spki)
	return pinPrefix + base64.StdEncoding.EncodeToString(sum[:]), nil
}

// CheckPin refuses a string that is not a well-formed pin.
func CheckPin(pin string) error {
	digest, ok := strings.CutPrefix(pin, pinPrefix)
	if !ok {
		return fmt.Errorf("pin %q does not start with %q", pin, pinPrefix)
	}
	if raw, err := base64.StdEncoding.DecodeString(digest); err != nil || len(raw) != sha256.Size {
		return fmt.Errorf("pin %q: after %q comes the base64 of a 32-byte SHA-256 digest", pin, pinPrefix)
	}
	return nil
}

// MatchPin reports whether pub is the key pin names.
func MatchPin(pin string, pub crypto.PublicKey) bool {
	got, err := Pin(pub)
	return err == nil && got == pin
}
