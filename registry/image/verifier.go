package image

import (
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// Verifier decides whether a signature over an image's signing input was made by a
// trusted signer. The default, Allowlist, checks offline against the image_signers
// allowlists in the store; a Sigstore or KMS verifier can take its place.
type Verifier interface {
	// Verify checks signature over input as made by the signer signerID of one of the
	// allowlists of tenants, tried in order, and returns the tenant whose allowlist
	// vouched for it. A failure is INVALID_INPUT at the path "signerId" (no such
	// signer, or a revoked one) or "signature" (it does not verify).
	Verify(tx *store.Tx, tenants []string, signerID string, input, signature []byte) (string, error)
}

// Allowlist is the default Verifier: the signers tenants and the platform (the root
// tenant) added on the registry's host.
type Allowlist struct{}

// Verify implements Verifier against the store's allowlists.
func (Allowlist) Verify(tx *store.Tx, tenants []string, signerID string, input, signature []byte) (string, error) {
	var failure error
	for _, tenant := range tenants {
		s, err := tx.ImageSigner(tenant, signerID)
		if proto.CodeOf(err) == proto.NotFound {
			continue
		}
		if err != nil {
			return "", err
		}
		if s.Revoked() {
			failure = proto.Errorf(proto.InvalidInput, "signer %q of tenant %q was revoked on %s", signerID, tenant, s.RevokedAt.Format("2006-01-02")).WithPath("signerId")
			continue
		}
		key, err := ParsePublicKey([]byte(s.PublicKey))
		if err != nil {
			return "", proto.Errorf(proto.Internal, "stored key of signer %q of tenant %q: %w", signerID, tenant, err)
		}
		ok, err := key.Verify(input, signature)
		if err != nil {
			return "", err
		}
		if ok {
			return tenant, nil
		}
		failure = proto.Errorf(proto.InvalidInput, "the signature does not verify against signer %q of tenant %q (%s): sign the exact signing input with that key", signerID, tenant, key.Fingerprint).WithPath("signature")
	}
	if failure == nil {
		failure = proto.Errorf(proto.InvalidInput, "no signer %q on the allowlist of %v: the host adds signers with `better-compute signers add`", signerID, tenants).WithPath("signerId")
	}
	return "", failure
}
