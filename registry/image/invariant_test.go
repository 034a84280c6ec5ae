package image

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// TestUnsignedNeverPublic runs a long random sequence (fixed seed) of registrations,
// promotions, signer revocations and re-additions, and direct attempts at the store's
// write path, and checks after every step that no tenant sees another's unsigned or
// private image and that every public image is verified.
func TestUnsignedNeverPublic(t *testing.T) {
	st := openCatalog(t)
	rng := rand.New(rand.NewPCG(2026, 9))
	tenants := []string{store.RootTenant, "acme", "beta"}
	keys := map[string]*openssl.Key{}
	for _, tn := range tenants {
		for _, id := range []string{"k1", "k2"} {
			keys[tn+"/"+id] = openssl.Generate(t, openssl.Ed25519)
			addSigner(t, st, tn, id, keys[tn+"/"+id])
		}
	}
	signed := map[string]RegisterRequest{}
	signedReq := func(req RegisterRequest, keyName, id string) RegisterRequest {
		k := fmt.Sprintf("%s|%s|%s|%s", req.Ref, req.Kind, keyName, id)
		if r, ok := signed[k]; ok {
			return r
		}
		signed[k] = sign(t, req, keys[keyName], id, formEd25519)
		return signed[k]
	}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	var ids []string
	owner := map[string]string{}
	remember := func(img store.Image, err error) {
		if err == nil {
			ids, owner[img.ID] = append(ids, img.ID), img.Tenant
		}
	}
	counts := map[string]int{}

	ops := []func() (string, error){
		func() (string, error) {
			tn, req := pick(tenants), osRequest(fmt.Sprintf("img%d@%d", rng.IntN(5), rng.IntN(4)))
			if rng.IntN(4) == 0 {
				req.Kind = proto.KindRamdisk
			}
			img, err := register(st, tn, req)
			remember(img, err)
			return "register unsigned " + req.Ref + " in " + tn, err
		},
		func() (string, error) {
			tn, req := pick(tenants), osRequest(fmt.Sprintf("img%d@%d", rng.IntN(5), rng.IntN(4)))
			if rng.IntN(4) == 0 {
				req.Kind = proto.KindRamdisk
			}
			// Mostly a signer of its own allowlist or the platform's, sometimes another's.
			signerTenant, id := pick([]string{tn, store.RootTenant, pick(tenants)}), pick([]string{"k1", "k2"})
			// Now and then the signature is made by another key than the one named.
			keyName := signerTenant + "/" + id
			if rng.IntN(5) == 0 {
				keyName = pick(tenants) + "/" + pick([]string{"k1", "k2"})
			}
			img, err := register(st, tn, signedReq(req, keyName, id))
			remember(img, err)
			return "register " + req.Ref + " in " + tn + " signed by " + keyName + " as " + id, err
		},
		func() (string, error) {
			if len(ids) == 0 {
				return "promote nothing", nil
			}
			id := pick(ids)
			tn := pick([]string{owner[id], owner[id], pick(tenants)})
			return "promote " + id + " as " + tn, st.Update(func(tx *store.Tx) error { _, err := Promote(tx, tn, id); return err })
		},
		func() (string, error) {
			if len(ids) == 0 {
				return "publish nothing", nil
			}
			id := pick(ids)
			return "store publish " + id, st.Update(func(tx *store.Tx) error { _, err := tx.PublishImage(id); return err })
		},
		func() (string, error) {
			img := store.Image{Tenant: pick(tenants), Ref: fmt.Sprintf("forged@%d", rng.IntN(1000)), Kind: proto.KindOS,
				Format: proto.FormatRaw, Compression: proto.CompressionNone, SHA256: digestA, SizeBytes: 1,
				Source: "https://x/y", Public: true, Verified: rng.IntN(2) == 0}
			return "store create public, verified " + fmt.Sprint(img.Verified), st.Update(func(tx *store.Tx) error { _, err := tx.CreateImage(img); return err })
		},
		func() (string, error) {
			tn, id := pick(tenants), pick([]string{"k1", "k2"})
			return "revoke " + tn + "/" + id, st.Update(func(tx *store.Tx) error { _, err := tx.RevokeImageSigner(tn, id); return err })
		},
		func() (string, error) {
			tn, id, keyName := pick(tenants), pick([]string{"k1", "k2"}), pick(tenants)+"/"+pick([]string{"k1", "k2"})
			return "add " + tn + "/" + id + " with key " + keyName, st.Update(func(tx *store.Tx) error { _, err := AddSigner(tx, tn, id, keys[keyName].PublicPEM); return err })
		},
	}
	for step := range 400 {
		what, err := ops[rng.IntN(len(ops))]()
		code := "ok"
		if err != nil {
			code = string(proto.CodeOf(err))
			// The store refuses a forged verified row without its signer as INTERNAL: a bug
			// of the caller, not bad input.
			if code == string(proto.Internal) && !strings.HasPrefix(what, "store create") {
				t.Fatalf("step %d, %s: %v", step, what, err)
			}
		}
		counts[code]++
		if err == nil && strings.HasPrefix(what, "promote ") {
			counts["promoted"]++
		}
		checkVisibility(t, st, tenants, fmt.Sprintf("after step %d (%s: %s)", step, what, code))
	}
	t.Logf("outcomes: %v", counts)
	if counts["ok"] < 50 || counts[string(proto.InvalidState)] < 10 || counts[string(proto.InvalidInput)] < 10 || counts["promoted"] < 5 {
		t.Errorf("the sequence did not exercise enough paths: %v", counts)
	}
}

// checkVisibility asserts the catalog's visibility invariants from every tenant's view.
func checkVisibility(t *testing.T, st *store.Store, tenants []string, when string) {
	t.Helper()
	st.View(func(tx *store.Tx) error {
		for _, tn := range tenants {
			cursor := ""
			for {
				imgs, next, err := List(tx, tn, "", store.Page{Cursor: cursor})
				if err != nil {
					t.Fatalf("%s: list %s: %v", when, tn, err)
				}
				for _, img := range imgs {
					if img.Public && (!img.Verified || img.Signature == "") {
						t.Fatalf("%s: %s is public but not verified: %+v", when, img.ID, img)
					}
					if img.Tenant != tn && !img.Public {
						t.Fatalf("%s: %s sees %s's private image %s", when, tn, img.Tenant, img.ID)
					}
					if img.Tenant != tn && img.Public {
						if err := VerifyImageForUse(tx, tn, img, UseOptions{AllowUnsigned: true}); proto.CodeOf(err) == proto.NotFound {
							t.Fatalf("%s: %s cannot see public %s", when, tn, img.ID)
						}
					}
				}
				if cursor = next; cursor == "" {
					break
				}
			}
		}
		return nil
	})
}
