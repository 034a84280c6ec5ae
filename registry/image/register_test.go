package image

import (
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit/openssl"
	"github.com/google/go-cmp/cmp"
)

func TestSigningInputBytes(t *testing.T) {
	img := store.Image{Kind: proto.KindOS, Ref: "ubuntu-24.04-server@2026.09", Format: proto.FormatRaw,
		Compression: proto.CompressionZstd, SHA256: strings.ToUpper(digestA)}
	want := "bc-image-v1\nos\nubuntu-24.04-server@2026.09\nraw\nzstd\n" + digestA + "\n"
	if diff := cmp.Diff(want, string(SigningInput(img))); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestRegisterFieldRules registers one request per bad field: each is INVALID_INPUT at
// its path, and nothing is stored.
func TestRegisterFieldRules(t *testing.T) {
	st := openCatalog(t)
	key := newSigner(t, st, "acme", "acme-1", openssl.Ed25519)
	good := osRequest("ubuntu@1")
	with := func(f func(r *RegisterRequest)) RegisterRequest { r := good; f(&r); return r }
	cases := map[string]struct {
		req  RegisterRequest
		path string
	}{
		"bad ref":              {with(func(r *RegisterRequest) { r.Ref = "Ubuntu" }), "ref"},
		"bad kind":             {with(func(r *RegisterRequest) { r.Kind = "vm" }), "kind"},
		"no format":            {with(func(r *RegisterRequest) { r.Format = "" }), "format"},
		"bad format":           {with(func(r *RegisterRequest) { r.Format = "vmdk" }), "format"},
		"bad compression":      {with(func(r *RegisterRequest) { r.Compression = "xz" }), "compression"},
		"short digest":         {with(func(r *RegisterRequest) { r.SHA256 = digestA[:63] }), "sha256"},
		"digest with prefix":   {with(func(r *RegisterRequest) { r.SHA256 = "sha256:" + digestA }), "sha256"},
		"zero size":            {with(func(r *RegisterRequest) { r.SizeBytes = new(int64(0)) }), "sizeBytes"},
		"negative size":        {with(func(r *RegisterRequest) { r.SizeBytes = new(int64(-1)) }), "sizeBytes"},
		"size past 2^53":       {with(func(r *RegisterRequest) { r.SizeBytes = new(int64(1 << 53)) }), "sizeBytes"},
		"http source":          {with(func(r *RegisterRequest) { r.Source = "http://x/y" }), "source"},
		"oci of another blob":  {with(func(r *RegisterRequest) { r.Source = "oci://r.example.com/os@sha256:" + strings.Repeat("0", 64) }), "source"},
		"signer alone":         {with(func(r *RegisterRequest) { r.SignerID = "acme-1" }), "signature"},
		"signature alone":      {with(func(r *RegisterRequest) { r.Signature = "AAAA" }), "signerId"},
		"bad signer id":        {with(func(r *RegisterRequest) { r.SignerID, r.Signature = "Acme 1", "AAAA" }), "signerId"},
		"bad signature base64": {with(func(r *RegisterRequest) { r.SignerID, r.Signature = "acme-1", "not base64!" }), "signature"},
		"unsigned ramdisk":     {with(func(r *RegisterRequest) { r.Kind = proto.KindRamdisk }), "signature"},
		"unknown signer":       {sign(t, good, key, "nobody", formEd25519), "signerId"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := register(st, "acme", tc.req)
			checkErr(t, err, proto.InvalidInput, tc.path, "")
		})
	}
	st.View(func(tx *store.Tx) error {
		if imgs, _, _ := tx.Images("acme", "", store.Page{}); len(imgs) != 0 {
			t.Errorf("bad requests stored %d images", len(imgs))
		}
		return nil
	})
	// Defaults and normalisation: kind os, compression none, digest lower-cased.
	img := mustRegister(t, st, "acme", with(func(r *RegisterRequest) { r.Compression, r.SHA256 = "", strings.ToUpper(digestA) }))
	if img.Kind != proto.KindOS || img.Compression != proto.CompressionNone || img.SHA256 != digestA || img.Verified || img.Public {
		t.Errorf("stored %+v", img)
	}
	_, err := register(st, "acme", good)
	checkErr(t, err, proto.Conflict, "ref", "")
	// Another tenant may use the same ref.
	mustRegister(t, st, "beta", good)
}

// TestRegisterSignatures registers images signed by openssl in every accepted form,
// and refuses each kind of tampering between signing and registering.
func TestRegisterSignatures(t *testing.T) {
	st := openCatalog(t)
	ed := newSigner(t, st, "acme", "acme-ed", openssl.Ed25519)
	ec := newSigner(t, st, "acme", "acme-ec", openssl.P256)
	platform := newSigner(t, st, store.RootTenant, "platform-2026", openssl.Ed25519)
	betaKey := newSigner(t, st, "beta", "beta-1", openssl.Ed25519)
	revoked := newSigner(t, st, "acme", "acme-old", openssl.P256)
	revokeSigner(t, st, "acme", "acme-old")

	n := 0
	next := func() RegisterRequest { n++; return osRequest("img@" + strings.Repeat("1", n)) }
	accepted := map[string]struct {
		req          RegisterRequest
		signerTenant string
	}{
		"ed25519":           {sign(t, next(), ed, "acme-ed", formEd25519), "acme"},
		"ecdsa der":         {sign(t, next(), ec, "acme-ec", formDER), "acme"},
		"ecdsa p1363":       {sign(t, next(), ec, "acme-ec", formP1363), "acme"},
		"platform signer":   {sign(t, next(), platform, "platform-2026", formEd25519), store.RootTenant},
		"ramdisk, platform": {sign(t, func() RegisterRequest { r := next(); r.Kind = proto.KindRamdisk; return r }(), platform, "platform-2026", formEd25519), store.RootTenant},
		"iso, gzip, oci src": {sign(t, func() RegisterRequest {
			r := next()
			r.Format, r.Compression, r.Source = proto.FormatISO, proto.CompressionGzip, "oci://r.example.com/isos/x@sha256:"+digestA
			return r
		}(), ed, "acme-ed", formEd25519), "acme"},
	}
	for name, tc := range accepted {
		t.Run(name, func(t *testing.T) {
			img := mustRegister(t, st, "acme", tc.req)
			if !img.Verified || img.SignerTenant != tc.signerTenant || img.Public {
				t.Fatalf("stored %+v", img)
			}
			checkErr(t, verifyForUse(st, "acme", img, UseOptions{}), "", "", "")
		})
	}

	base := next()
	signed := sign(t, base, ed, "acme-ed", formEd25519)
	with := func(f func(r *RegisterRequest)) RegisterRequest { r := signed; f(&r); return r }
	refused := map[string]struct {
		req  RegisterRequest
		path string
	}{
		"kind changed":            {with(func(r *RegisterRequest) { r.Kind = proto.KindRamdisk }), "signerId"},
		"ref changed":             {with(func(r *RegisterRequest) { r.Ref = "img@other" }), "signature"},
		"format changed":          {with(func(r *RegisterRequest) { r.Format = proto.FormatQcow2 }), "signature"},
		"compression changed":     {with(func(r *RegisterRequest) { r.Compression = proto.CompressionGzip }), "signature"},
		"digest changed":          {with(func(r *RegisterRequest) { r.SHA256 = strings.Repeat("0", 64) }), "signature"},
		"first bit flipped":       {with(func(r *RegisterRequest) { r.Signature = flipBit(r.Signature, 0) }), "signature"},
		"last bit flipped":        {with(func(r *RegisterRequest) { r.Signature = flipBit(r.Signature, 511) }), "signature"},
		"wrong signer named":      {with(func(r *RegisterRequest) { r.SignerID = "acme-ec" }), "signature"},
		"revoked signer":          {sign(t, base, revoked, "acme-old", formDER), "signerId"},
		"another tenant's signer": {sign(t, base, betaKey, "beta-1", formEd25519), "signerId"},
		"ramdisk, tenant signer":  {sign(t, func() RegisterRequest { r := base; r.Kind = proto.KindRamdisk; return r }(), ed, "acme-ed", formEd25519), "signerId"},
		"unlisted key":            {sign(t, base, openssl.Generate(t, openssl.Ed25519), "acme-ed", formEd25519), "signature"},
		"ecdsa der, high S":       {sign(t, base, ec, "acme-ec", formDERHighS), "signature"},
		"ecdsa p1363, high S":     {sign(t, base, ec, "acme-ec", formP1363HighS), "signature"},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			_, err := register(st, "acme", tc.req)
			checkErr(t, err, proto.InvalidInput, tc.path, "")
		})
	}
	// The digest is signed lower-case, whatever case it was registered in.
	upper := signed
	upper.SHA256 = strings.ToUpper(upper.SHA256)
	mustRegister(t, st, "acme", upper)
}
