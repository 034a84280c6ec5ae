package image

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/testkit/openssl"
	"github.com/google/go-cmp/cmp"
)

// TestCrossTenant checks that tenant beta can neither read, list, resolve, promote nor
// use acme's private images, signed or not, and sees acme's once promoted.
func TestCrossTenant(t *testing.T) {
	st := openCatalog(t)
	key := newSigner(t, st, "acme", "acme-1", openssl.Ed25519)
	signed := mustRegister(t, st, "acme", sign(t, osRequest("private@1"), key, "acme-1", formEd25519))
	unsigned := mustRegister(t, st, "acme", osRequest("unsigned@1"))

	for _, img := range []store.Image{signed, unsigned} {
		t.Run(img.Ref, func(t *testing.T) {
			st.View(func(tx *store.Tx) error {
				_, err := Get(tx, "beta", img.ID)
				checkErr(t, err, proto.NotFound, "", "")
				_, err = ResolveImage(tx, "beta", img.Ref)
				checkErr(t, err, proto.NotFound, "ref", "")
				checkErr(t, VerifyImageForUse(tx, "beta", img, UseOptions{AllowUnsigned: true}), proto.NotFound, "", "")
				list, _, err := List(tx, "beta", "", store.Page{})
				if err != nil || len(list) != 0 {
					t.Errorf("beta lists %v, %v", list, err)
				}
				return nil
			})
			err := st.Update(func(tx *store.Tx) error { _, err := Promote(tx, "beta", img.ID); return err })
			checkErr(t, err, proto.NotFound, "", "")
		})
	}
	// acme cannot promote its unsigned image; it can promote the signed one.
	err := st.Update(func(tx *store.Tx) error { _, err := Promote(tx, "acme", unsigned.ID); return err })
	checkErr(t, err, proto.InvalidState, "", "unsigned")
	storetest.Update(t, st, func(tx *store.Tx) (err error) { signed, err = Promote(tx, "acme", signed.ID); return err })
	st.View(func(tx *store.Tx) error {
		got, err := Get(tx, "beta", signed.ID)
		if err != nil || !got.Public {
			t.Errorf("beta gets the promoted image: %+v, %v", got, err)
		}
		// Promoted, it is reached by its owner's name only, and beta trusts no acme key.
		_, err = ResolveImage(tx, "beta", signed.Ref)
		checkErr(t, err, proto.NotFound, "ref", "")
		if got, err := ResolveImage(tx, "beta", "acme/"+signed.Ref); err != nil || got.ID != signed.ID {
			t.Errorf("beta resolves acme/%s: %+v, %v", signed.Ref, got, err)
		}
		checkErr(t, VerifyImageForUse(tx, "beta", got, UseOptions{}), proto.InvalidState, "", "untrusted-signer")
		return nil
	})
	// Once beta's host puts acme's key on beta's allowlist, under the id the image names,
	// beta may use it.
	addSigner(t, st, "beta", "acme-1", key)
	checkErr(t, verifyForUse(st, "beta", signed, UseOptions{}), "", "", "")
	// beta still cannot promote it: it is not beta's.
	err = st.Update(func(tx *store.Tx) error { _, err := Promote(tx, "beta", signed.ID); return err })
	checkErr(t, err, proto.Forbidden, "", "")
}

// TestResolveImage checks what a ref resolves to: a bare ref is the tenant's own image,
// then the platform's public one, never another tenant's; TENANT/ref is that tenant's
// public image.
func TestResolveImage(t *testing.T) {
	st := openCatalog(t)
	storetest.Update(t, st, func(tx *store.Tx) error { _, err := tx.CreateTenant("gamma"); return err })
	keys := map[string]*openssl.Key{}
	for _, tn := range []string{store.RootTenant, "acme", "beta", "gamma"} {
		keys[tn] = openssl.Generate(t, openssl.Ed25519)
		addSigner(t, st, tn, "k", keys[tn])
	}
	publish := func(tenant, ref string) store.Image {
		img := mustRegister(t, st, tenant, sign(t, osRequest(ref), keys[tenant], "k", formEd25519))
		storetest.Update(t, st, func(tx *store.Tx) (err error) { img, err = Promote(tx, tenant, img.ID); return err })
		return img
	}
	gammaShared := publish("gamma", "shared@1")
	betaShared := publish("beta", "shared@1")
	platformBase := publish(store.RootTenant, "base@1")
	publish("beta", "base@1")
	acmeOwn := mustRegister(t, st, "acme", osRequest("base@1"))
	acmeQuiet := mustRegister(t, st, "acme", osRequest("quiet@1"))
	platformQuiet := mustRegister(t, st, store.RootTenant, sign(t, osRequest("quiet@2"), keys[store.RootTenant], "k", formEd25519))

	cases := map[string]struct {
		tenant, ref string
		want        string
		code        proto.Code
	}{
		"own first":                    {tenant: "acme", ref: "base@1", want: acmeOwn.ID},
		"own by its own name":          {tenant: "acme", ref: "acme/quiet@1", want: acmeQuiet.ID},
		"platform before other":        {tenant: "gamma", ref: "base@1", want: platformBase.ID},
		"platform by name":             {tenant: "gamma", ref: "root/base@1", want: platformBase.ID},
		"another tenant's, bare":       {tenant: "acme", ref: "shared@1", code: proto.NotFound},
		"another tenant's, by name":    {tenant: "acme", ref: "gamma/shared@1", want: gammaShared.ID},
		"another tenant's, other name": {tenant: "acme", ref: "beta/shared@1", want: betaShared.ID},
		"another's private, by name":   {tenant: "beta", ref: "acme/quiet@1", code: proto.NotFound},
		"platform's private":           {tenant: "beta", ref: "quiet@2", code: proto.NotFound},
		"platform's own private":       {tenant: store.RootTenant, ref: "quiet@2", want: platformQuiet.ID},
		"unknown tenant":               {tenant: "acme", ref: "nobody/shared@1", code: proto.NotFound},
		"missing":                      {tenant: "acme", ref: "none@1", code: proto.NotFound},
		"bad ref":                      {tenant: "acme", ref: "Base", code: proto.InvalidInput},
		"bad owner":                    {tenant: "acme", ref: "Gamma/shared@1", code: proto.InvalidInput},
		"bad ref after owner":          {tenant: "acme", ref: "gamma/Shared", code: proto.InvalidInput},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got store.Image
			err := st.View(func(tx *store.Tx) (err error) { got, err = ResolveImage(tx, tc.tenant, tc.ref); return err })
			if tc.code != "" {
				checkErr(t, err, tc.code, "ref", "")
				return
			}
			if err != nil || got.ID != tc.want {
				t.Fatalf("got %s (%s), %v; want %s", got.ID, got.Tenant, err, tc.want)
			}
		})
	}
}

func TestSigners(t *testing.T) {
	st := openCatalog(t)
	a := openssl.Generate(t, openssl.Ed25519)
	b := openssl.Generate(t, openssl.P256)
	steps := []struct {
		name string
		do   func(tx *store.Tx) error
		code proto.Code
		path string
	}{
		{"add", func(tx *store.Tx) error { _, err := AddSigner(tx, "acme", "k1", a.PublicPEM); return err }, "", ""},
		{"add again", func(tx *store.Tx) error { _, err := AddSigner(tx, "acme", "k1", a.PublicPEM); return err }, proto.Conflict, "id"},
		{"same id in another tenant", func(tx *store.Tx) error { _, err := AddSigner(tx, "beta", "k1", b.PublicPEM); return err }, "", ""},
		{"bad id", func(tx *store.Tx) error { _, err := AddSigner(tx, "acme", "K 1", a.PublicPEM); return err }, proto.InvalidInput, "id"},
		{"p384 key", func(tx *store.Tx) error {
			_, err := AddSigner(tx, "acme", "k2", openssl.Generate(t, openssl.P384).PublicPEM)
			return err
		}, proto.InvalidInput, "publicKey"},
		{"unknown tenant", func(tx *store.Tx) error { _, err := AddSigner(tx, "nobody", "k1", a.PublicPEM); return err }, proto.NotFound, ""},
		{"revoke", func(tx *store.Tx) error { _, err := tx.RevokeImageSigner("acme", "k1"); return err }, "", ""},
		{"revoke again", func(tx *store.Tx) error { _, err := tx.RevokeImageSigner("acme", "k1"); return err }, proto.InvalidState, ""},
		{"revoke unknown", func(tx *store.Tx) error { _, err := tx.RevokeImageSigner("acme", "k9"); return err }, proto.NotFound, ""},
		{"re-add with another key", func(tx *store.Tx) error { _, err := AddSigner(tx, "acme", "k1", b.PublicPEM); return err }, proto.Conflict, "id"},
		{"re-add with its key", func(tx *store.Tx) error { _, err := AddSigner(tx, "acme", "k1", a.PublicPEM); return err }, "", ""},
	}
	for _, s := range steps {
		err := st.Update(s.do)
		if s.code == "" && err != nil || s.code != "" && (proto.CodeOf(err) != s.code || proto.AsError(err).Details.Path != s.path) {
			t.Fatalf("%s: got %v, want %q at %q", s.name, err, s.code, s.path)
		}
	}
	st.View(func(tx *store.Tx) error {
		s, err := tx.ImageSigner("acme", "k1")
		if err != nil {
			t.Fatal(err)
		}
		var events []string
		for _, e := range s.History {
			events = append(events, e.Event)
		}
		if diff := cmp.Diff([]string{"added", "revoked", "reinstated"}, events); diff != "" || s.Revoked() || s.Algorithm != AlgEd25519 {
			t.Errorf("history (-want +got):\n%s\n%+v", diff, s)
		}
		all, _, err := tx.ImageSigners("", store.Page{})
		if err != nil || len(all) != 2 {
			t.Errorf("all signers: %d, %v", len(all), err)
		}
		return nil
	})
}
