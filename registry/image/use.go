package image

import (
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// UseOptions tune VerifyImageForUse. The zero value is the production setting.
type UseOptions struct {
	// Verifier re-verifies signatures; Allowlist when nil. Give the one images were
	// registered with.
	Verifier Verifier
	// AllowUnsigned lets an unsigned OS image of the deploying tenant through: for
	// development only. It never lets a ramdisk through, nor a signed image whose
	// signature fails.
	AllowUnsigned bool
}

// VerifyImageForUse is the check right before a deploy (or a site cache) uses img for
// tenant: it re-verifies the stored signature against the allowlist that verified it at
// registration. An image tenant may not see is NOT_FOUND. An unsigned image is
// INVALID_STATE with reason "unsigned"; a revoked signer, or a catalog row whose signed
// fields changed since it was signed, is INVALID_STATE with reason "signature".
func VerifyImageForUse(tx *store.Tx, tenant string, img store.Image, opts UseOptions) error {
	if !visible(tenant, img) {
		return proto.Errorf(proto.NotFound, "image %q not found", img.ID)
	}
	badSignature := func(format string, args ...any) error {
		return proto.Errorf(proto.InvalidState, "image %s cannot be used: "+format, append([]any{img.Ref}, args...)...).WithReason("signature")
	}
	if img.Signature == "" && img.SignerID == "" {
		switch {
		case img.Verified || img.Public:
			return badSignature("the catalog says it is verified but it holds no signature")
		case opts.AllowUnsigned && img.Kind == proto.KindOS && img.Tenant == tenant:
			return nil
		}
		return proto.Errorf(proto.InvalidState, "image %s is not signed: register a signed version", img.Ref).WithReason("unsigned")
	}
	switch {
	case !img.Verified:
		return badSignature("it carries a signature the catalog never verified")
	case img.SignerTenant != store.RootTenant && (img.SignerTenant != img.Tenant || img.Kind == proto.KindRamdisk):
		return badSignature("its signer is not on the allowlist of its tenant or the platform")
	}
	sig, err := DecodeSignature(img.Signature)
	if err != nil {
		return badSignature("%s", proto.AsError(err).Message)
	}
	v := opts.Verifier
	if v == nil {
		v = Allowlist{}
	}
	if _, err := v.Verify(tx, []string{img.SignerTenant}, img.SignerID, SigningInput(img), sig); err != nil {
		if e := proto.AsError(err); e.Code == proto.InvalidInput {
			return badSignature("%s", e.Message)
		}
		return err
	}
	return nil
}
