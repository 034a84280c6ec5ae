// Package image is the registry's image catalog: registering images by digest with
// their signing input and signature, the signer allowlists they verify against, who
// sees which image, re-verification right before a deploy uses one, and the
// bookkeeping of which site caches hold which images and which they should.
//
// Functions take the store transaction they work in, so a caller (an API method, a
// workflow step) composes them with its own reads and writes atomically.
package image

import (
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// visible reports whether tenant may see img: its own, or a public one.
func visible(tenant string, img store.Image) bool { return img.Tenant == tenant || img.Public }

// Get returns an image tenant may see; any other is NOT_FOUND.
func Get(tx *store.Tx, tenant, id string) (store.Image, error) {
	img, err := tx.Image(id)
	if err == nil && !visible(tenant, img) {
		err = proto.Errorf(proto.NotFound, "image %q not found: %s", id, store.ImagesListed)
	}
	return img, err
}

// List returns tenant's own and the public images, ordered by ref, one page at a
// time; kind, when set, keeps only that kind.
func List(tx *store.Tx, tenant string, kind proto.ImageKind, p store.Page) ([]store.Image, string, error) {
	if kind != "" && !slices.Contains(proto.ImageKinds, kind) {
		return nil, "", proto.Errorf(proto.InvalidInput, "kind %q: use one of %v", kind, proto.ImageKinds).WithPath("kind")
	}
	return tx.Images(tenant, kind, p)
}

// Promote makes one of tenant's verified images public to every tenant. An unsigned
// image is INVALID_STATE; another tenant's is NOT_FOUND (or FORBIDDEN once public).
func Promote(tx *store.Tx, tenant, id string) (store.Image, error) {
	img, err := Get(tx, tenant, id)
	if err != nil {
		return img, err
	}
	if img.Tenant != tenant {
		return img, proto.Errorf(proto.Forbidden, "image %s belongs to another tenant: only its owner promotes it", id)
	}
	return tx.PublishImage(id)
}

// ResolveImage finds the image a ref names for tenant. A bare name@version is tenant's
// own image, else a public one of the platform (the root tenant): another tenant's
// image never becomes what tenant's bare ref names. TENANT/name@version names that
// tenant's public image (tenant's own when it names itself). A ref that resolves to
// nothing is NOT_FOUND at "ref". Resolving is not trusting: VerifyImageForUse decides
// whether tenant may use what a ref resolved to.
func ResolveImage(tx *store.Tx, tenant, ref string) (store.Image, error) {
	owner, r, err := ParseUseRef(ref)
	if err != nil {
		return store.Image{}, err
	}
	var tries []string
	switch owner {
	case "":
		tries = []string{tenant, store.RootTenant}
	default:
		tries = []string{owner}
	}
	for _, in := range tries {
		img, err := tx.ImageByRef(in, r.String())
		switch {
		case proto.CodeOf(err) == proto.NotFound:
		case err != nil:
			return img, err
		case visible(tenant, img):
			return img, nil
		}
	}
	if owner == "" {
		return store.Image{}, proto.Errorf(proto.NotFound, "no image %s in tenant %q or among the platform's public images (another tenant's public image is named TENANT/%s)", r, tenant, r).WithPath("ref")
	}
	return store.Image{}, proto.Errorf(proto.NotFound, "tenant %q has no public image %s", owner, r).WithPath("ref")
}
