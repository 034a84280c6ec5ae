package image

import (
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// TestVerifyImageForUse re-verifies stored images as a deploy would, with catalog rows
// tampered with after registration, signers revoked, and unsigned images.
func TestVerifyImageForUse(t *testing.T) {
	st := openCatalog(t)
	ed := newSigner(t, st, "acme", "acme-ed", openssl.Ed25519)
	ec := newSigner(t, st, "acme", "acme-ec", openssl.P256)
	platform := newSigner(t, st, store.RootTenant, "platform-2026", openssl.P256)
	newSigner(t, st, "beta", "acme-ed", openssl.Ed25519) // same id, another tenant, another key
	addSigner(t, st, "acme", "acme-gone", ec)

	signedEd := mustRegister(t, st, "acme", sign(t, osRequest("ed@1"), ed, "acme-ed", formEd25519))
	signedP1363 := mustRegister(t, st, "acme", sign(t, osRequest("p1363@1"), ec, "acme-ec", formP1363))
	byGone := mustRegister(t, st, "acme", sign(t, osRequest("gone@1"), ec, "acme-gone", formDER))
	ramdiskReq := osRequest("ramdisk@1")
	ramdiskReq.Kind = proto.KindRamdisk
	ramdisk := mustRegister(t, st, "acme", sign(t, ramdiskReq, platform, "platform-2026", formDER))
	unsigned := mustRegister(t, st, "acme", osRequest("unsigned@1"))
	revokeSigner(t, st, "acme", "acme-gone")
	// Public images: beta's acme-ed is another key; beta's host put acme's acme-ec key on
	// beta's allowlist under the same id.
	addSigner(t, st, "beta", "acme-ec", ec)
	promote := func(img store.Image) store.Image {
		storetest.Update(t, st, func(tx *store.Tx) (err error) { img, err = Promote(tx, "acme", img.ID); return err })
		return img
	}
	publicEd := promote(mustRegister(t, st, "acme", sign(t, osRequest("public-ed@1"), ed, "acme-ed", formEd25519)))
	publicEC := promote(mustRegister(t, st, "acme", sign(t, osRequest("public-ec@1"), ec, "acme-ec", formDER)))
	publicByPlatform := promote(mustRegister(t, st, "acme", sign(t, osRequest("public-platform@1"), platform, "platform-2026", formDER)))

	tamper := func(img store.Image, f func(i *store.Image)) store.Image { f(&img); return img }
	cases := map[string]struct {
		img    store.Image
		tenant string
		opts   UseOptions
		code   proto.Code
		reason string
	}{
		"ed25519":               {img: signedEd},
		"p1363":                 {img: signedP1363},
		"platform ramdisk":      {img: ramdisk},
		"kind changed":          {img: tamper(signedEd, func(i *store.Image) { i.Kind = proto.KindRamdisk }), code: proto.InvalidState, reason: "signature"},
		"ref changed":           {img: tamper(signedEd, func(i *store.Image) { i.Ref = "ed@2" }), code: proto.InvalidState, reason: "signature"},
		"format changed":        {img: tamper(signedEd, func(i *store.Image) { i.Format = proto.FormatQcow2 }), code: proto.InvalidState, reason: "signature"},
		"compression changed":   {img: tamper(signedEd, func(i *store.Image) { i.Compression = proto.CompressionNone }), code: proto.InvalidState, reason: "signature"},
		"digest changed":        {img: tamper(signedEd, func(i *store.Image) { i.SHA256 = strings.Repeat("f", 64) }), code: proto.InvalidState, reason: "signature"},
		"signature bit flipped": {img: tamper(signedP1363, func(i *store.Image) { i.Signature = flipBit(i.Signature, 100) }), code: proto.InvalidState, reason: "signature"},
		"signature swapped":     {img: tamper(signedEd, func(i *store.Image) { i.Signature = signedP1363.Signature }), code: proto.InvalidState, reason: "signature"},
		"signature garbled":     {img: tamper(signedEd, func(i *store.Image) { i.Signature = "!" }), code: proto.InvalidState, reason: "signature"},
		"signer renamed":        {img: tamper(signedEd, func(i *store.Image) { i.SignerID = "acme-ec" }), code: proto.InvalidState, reason: "signature"},
		"signer tenant moved":   {img: tamper(signedEd, func(i *store.Image) { i.SignerTenant = "beta" }), code: proto.InvalidState, reason: "signature"},
		// Which allowlist verified it at registration is a record, not what is trusted
		// now: the deploying tenant's and the platform's allowlists are.
		"signer tenant platform":        {img: tamper(signedEd, func(i *store.Image) { i.SignerTenant = store.RootTenant })},
		"signer tenant platform, beta":  {img: tamper(publicEd, func(i *store.Image) { i.SignerTenant = store.RootTenant }), tenant: "beta", code: proto.InvalidState, reason: "signature"},
		"public, tenant signer, beta":   {img: publicEd, tenant: "beta", code: proto.InvalidState, reason: "untrusted-signer"},
		"public, tenant signer, gamma":  {img: publicEd, tenant: "gamma", code: proto.InvalidState, reason: "untrusted-signer"},
		"public, platform signer, beta": {img: publicByPlatform, tenant: "beta"},
		"public, trusted by beta":       {img: publicEC, tenant: "beta"},
		"verified flag cleared":         {img: tamper(signedEd, func(i *store.Image) { i.Verified = false }), code: proto.InvalidState, reason: "signature"},
		"signature stripped":            {img: tamper(signedEd, func(i *store.Image) { i.Signature, i.SignerID = "", "" }), code: proto.InvalidState, reason: "signature"},
		"ramdisk, tenant signer":        {img: tamper(ramdisk, func(i *store.Image) { i.SignerTenant = "acme" }), code: proto.InvalidState, reason: "signature"},
		"revoked signer":                {img: byGone, code: proto.InvalidState, reason: "signature"},
		"revoked, allowUnsigned":        {img: byGone, opts: UseOptions{AllowUnsigned: true}, code: proto.InvalidState, reason: "signature"},
		"tampered, allowUnsigned": {img: tamper(signedEd, func(i *store.Image) { i.Ref = "x@1" }), opts: UseOptions{AllowUnsigned: true},
			code: proto.InvalidState, reason: "signature"},
		"unsigned":                {img: unsigned, code: proto.InvalidState, reason: "unsigned"},
		"unsigned, allowUnsigned": {img: unsigned, opts: UseOptions{AllowUnsigned: true}},
		"unsigned ramdisk row, allowUnsigned": {img: tamper(unsigned, func(i *store.Image) { i.Kind = proto.KindRamdisk }), opts: UseOptions{AllowUnsigned: true},
			code: proto.InvalidState, reason: "unsigned"},
		"unsigned marked public":  {img: tamper(unsigned, func(i *store.Image) { i.Public = true }), tenant: "beta", code: proto.InvalidState, reason: "signature"},
		"other tenant, private":   {img: signedEd, tenant: "beta", code: proto.NotFound},
		"other tenant, unsigned":  {img: unsigned, tenant: "beta", opts: UseOptions{AllowUnsigned: true}, code: proto.NotFound},
		"explicit verifier works": {img: signedEd, opts: UseOptions{Verifier: Allowlist{}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tenant := tc.tenant
			if tenant == "" {
				tenant = "acme"
			}
			checkErr(t, verifyForUse(st, tenant, tc.img, tc.opts), tc.code, "", tc.reason)
		})
	}

	// Reinstating the revoked signer with its own key makes its images usable again.
	addSigner(t, st, "acme", "acme-gone", ec)
	checkErr(t, verifyForUse(st, "acme", byGone, UseOptions{}), "", "", "")
}

func flipBit(b64 string, bit int) string {
	sig, err := DecodeSignature(b64)
	if err != nil {
		panic(err)
	}
	sig[bit/8] ^= 1 << (bit % 8)
	return encodeSignature(sig)
}
