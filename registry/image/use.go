package image

import (
	"slices"

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
// tenant: it re-verifies the stored signature against the allowlists tenant trusts, its
// own and the platform's (a ramdisk: the platform's only), whoever owns the image. An
// image tenant may not see is NOT_FOUND. An unsigned image is INVALID_STATE with reason
// "unsigned"; a revoked signer, or a catalog row whose signed fields changed since it
// was signed, is INVALID_STATE with reason "signature"; another tenant's image vouched
// for only by a key neither tenant nor the platform trusts is INVALID_STATE with reason
// "untrusted-signer", naming the signer tenant's allowlist would need.
func VerifyImageForUse(tx *store.Tx, tenant string, img store.Image, opts UseOptions) error {
	if !visible(tenant, img) {
		return proto.Errorf(proto.NotFound, "image %q not found", img.ID)
	}
	badSignature := func(format string, args ...any) error {
		return proto.Errorf(proto.InvalidState, "image %s cannot be used: "+format, append([]any{img.Ref}, args...)...).WithReason(proto.ReasonSignature)
	}
	if img.Signature == "" && img.SignerID == "" {
		switch {
		case img.Verified || img.Public:
			return badSignature("the catalog says it is verified but it holds no signature")
		case opts.AllowUnsigned && img.Kind == proto.KindOS && img.Tenant == tenant:
			return nil
		}
		return proto.Errorf(proto.InvalidState, "image %s is not signed: register a signed version", img.Ref).WithReason(proto.ReasonUnsigned)
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
	trusted := allowlists(tenant, img.Kind)
	if _, err := v.Verify(tx, trusted, img.SignerID, SigningInput(img), sig); err != nil {
		e := proto.AsError(err)
		switch {
		case e.Code != proto.InvalidInput:
			return err
		case !slices.Contains(trusted, img.SignerTenant):
			return untrustedSigner(tx, tenant, img)
		}
		return badSignature("%s", e.Message)
	}
	return nil
}

// VerifyRamdiskExtra is VerifyImageForUse for an image a pool names as an extra
// initrd of its ramdisk boots (policy.ramdiskExtras): it must be of kind ramdisk (else
// INVALID_STATE with the reason not-ramdisk), and then it is verified as every ramdisk
// is, against the platform's signers only and never let through unsigned.
func VerifyRamdiskExtra(tx *store.Tx, tenant string, img store.Image, v Verifier) error {
	if err := proto.CheckRamdiskExtra(img.Ref, img.Kind); err != nil {
		return err
	}
	return VerifyImageForUse(tx, tenant, img, UseOptions{Verifier: v})
}

// allowlists are the signer allowlists tenant trusts for an image of kind, in the order
// they are tried: its own, then the platform's; the platform's only for a ramdisk.
func allowlists(tenant string, kind proto.ImageKind) []string {
	if kind == proto.KindRamdisk || tenant == store.RootTenant {
		return []string{store.RootTenant}
	}
	return []string{tenant, store.RootTenant}
}

// untrustedSigner is the refusal of another tenant's image that only that tenant's key
// vouches for: it names the signer, and its key's fingerprint, that tenant's allowlist
// (or the platform's) would need.
func untrustedSigner(tx *store.Tx, tenant string, img store.Image) error {
	key := ""
	if s, err := tx.ImageSigner(img.SignerTenant, img.SignerID); err == nil {
		key = " (key " + s.Fingerprint + ")"
	}
	return proto.Errorf(proto.InvalidState, "image %s/%s is signed by signer %q of tenant %s%s, which is on neither tenant %s's allowlist nor the platform's: to trust it, the host adds that key to %s's allowlist as signer %q (`better-compute signers add`), or a platform signer signs the image",
		img.Tenant, img.Ref, img.SignerID, img.SignerTenant, key, tenant, tenant, img.SignerID).WithReason(proto.ReasonUntrustedSigner)
}
