package image

import (
	"regexp"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// signerID is the charset of signer ids: 1 to 64 lower-case letters, digits, '.', '_'
// and '-', starting with a letter or a digit.
var signerID = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// CheckSignerID refuses an id outside the charset with INVALID_INPUT at "signerId".
func CheckSignerID(id string) error {
	if !signerID.MatchString(id) {
		return proto.Errorf(proto.InvalidInput, "signer id %q: use 1 to 64 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", id).WithPath("signerId")
	}
	return nil
}

// AddSigner puts the SPKI PEM key publicKeyPEM on tenant's allowlist under id (the
// root tenant's allowlist is the platform's). Only Ed25519 and ECDSA P-256 keys are
// accepted. A revoked id comes back only with its own key.
func AddSigner(tx *store.Tx, tenant, id string, publicKeyPEM []byte) (store.ImageSigner, error) {
	if err := CheckSignerID(id); err != nil {
		return store.ImageSigner{}, proto.AsError(err).WithPath("id")
	}
	key, err := ParsePublicKey(publicKeyPEM)
	if err != nil {
		return store.ImageSigner{}, err
	}
	return tx.AddImageSigner(store.ImageSigner{
		Tenant: tenant, ID: id, Algorithm: key.Algorithm,
		PublicKey: string(publicKeyPEM), Fingerprint: key.Fingerprint,
	})
}
