package image

import (
	"encoding/base64"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// openCatalog opens a store in a fresh directory holding the tenants root, acme and beta.
func openCatalog(t testing.TB) *store.Store { t.Helper(); return openCatalogWith(t, store.Options{}) }

// openCatalogWith is openCatalog with store options, such as a clock.
func openCatalogWith(t testing.TB, opts store.Options) *store.Store {
	t.Helper()
	return openCatalogOn(t, storetest.Open, opts)
}

// openCatalogOn is openCatalogWith on the backend open opens (storetest.Backends).
func openCatalogOn(t testing.TB, open func(testing.TB, store.Options) *store.Store, opts store.Options) *store.Store {
	t.Helper()
	st := open(t, opts)
	storetest.Update(t, st, func(tx *store.Tx) error {
		for _, tn := range []string{store.RootTenant, "acme", "beta"} {
			if _, err := tx.CreateTenant(tn); err != nil {
				return err
			}
		}
		return nil
	})
	return st
}

// newSigner makes a key of alg and adds it as signer id of tenant.
func newSigner(t testing.TB, st *store.Store, tenant, id string, alg openssl.Algorithm) *openssl.Key {
	t.Helper()
	key := openssl.Generate(t, alg)
	addSigner(t, st, tenant, id, key)
	return key
}

func addSigner(t testing.TB, st *store.Store, tenant, id string, key *openssl.Key) {
	t.Helper()
	storetest.Update(t, st, func(tx *store.Tx) error { _, err := AddSigner(tx, tenant, id, key.PublicPEM); return err })
}

func revokeSigner(t testing.TB, st *store.Store, tenant, id string) {
	t.Helper()
	storetest.Update(t, st, func(tx *store.Tx) error { _, err := tx.RevokeImageSigner(tenant, id); return err })
}

// sigForm is how a test encodes an openssl signature.
type sigForm string

const (
	formEd25519 sigForm = "ed25519"
	formDER     sigForm = "ecdsa-der"
	formP1363   sigForm = "ecdsa-p1363"
	// The high-S twins of the two ECDSA forms, which the catalog refuses.
	formDERHighS   sigForm = "ecdsa-der-high-s"
	formP1363HighS sigForm = "ecdsa-p1363-high-s"
)

// osRequest is a valid unsigned request for an OS image.
func osRequest(ref string) RegisterRequest {
	return RegisterRequest{
		Ref: ref, Format: proto.FormatRaw, Compression: proto.CompressionZstd,
		SHA256: digestA, SizeBytes: new(int64(3221225472)), Source: "https://images.example.com/" + ref + ".raw.zst",
	}
}

// signingInputOf is the signing input of what req would register.
func signingInputOf(t testing.TB, req RegisterRequest) []byte {
	t.Helper()
	req.SignerID, req.Signature = "", ""
	img, _, err := validate(req)
	if err != nil {
		t.Fatal(err)
	}
	return SigningInput(img)
}

// sign signs req's signing input with key, as signer id, in the given form.
func sign(t testing.TB, req RegisterRequest, key *openssl.Key, id string, form sigForm) RegisterRequest {
	t.Helper()
	sig := key.Sign(t, signingInputOf(t, req))
	if form == formDERHighS || form == formP1363HighS {
		sig = openssl.HighS(t, sig)
	}
	if form == formP1363 || form == formP1363HighS {
		sig = openssl.P1363(t, sig)
	}
	req.SignerID, req.Signature = id, base64.StdEncoding.EncodeToString(sig)
	return req
}

func register(st *store.Store, tenant string, req RegisterRequest) (img store.Image, err error) {
	err = st.Update(func(tx *store.Tx) (err error) { img, err = Register(tx, Allowlist{}, tenant, req); return err })
	return img, err
}

func mustRegister(t testing.TB, st *store.Store, tenant string, req RegisterRequest) store.Image {
	t.Helper()
	img, err := register(st, tenant, req)
	if err != nil {
		t.Fatalf("register %s in %s: %v", req.Ref, tenant, err)
	}
	return img
}

func verifyForUse(st *store.Store, tenant string, img store.Image, opts UseOptions) error {
	return st.View(func(tx *store.Tx) error { return VerifyImageForUse(tx, tenant, img, opts) })
}

// checkErr fails unless err has the code, path and reason given (empty code: no error).
func checkErr(t testing.TB, err error, code proto.Code, path, reason string) {
	t.Helper()
	if code == "" {
		if err != nil {
			t.Fatalf("got %v, want no error", err)
		}
		return
	}
	e := proto.AsError(err)
	if err == nil || e.Code != code || e.Details.Path != path || e.Details.Reason != reason {
		t.Fatalf("got %v (path %q, reason %q); want %s at %q, reason %q", err, e.Details.Path, e.Details.Reason, code, path, reason)
	}
}
