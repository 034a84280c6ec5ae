// Package image is the registry's image catalog: registering images by digest with
// their signing input and signature, the signer allowlists they verify against, who
// sees which image, re-verification right before a deploy uses one, and the
// bookkeeping of which site caches hold which images and which they should.
//
// Functions take the store transaction they work in, so a caller (an API method, a
// workflow step) composes them with its own reads and writes atomically.
package image

import (
	"cmp"
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
		err = proto.Errorf(proto.NotFound, "image %q not found", id)
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

// ResolveImage finds the image a ref names for tenant: its own first, then a public
// one (the platform's before other tenants', then the one promoted first). A ref
// that resolves to nothing is NOT_FOUND.
func ResolveImage(tx *store.Tx, tenant, ref string) (store.Image, error) {
	if _, err := ParseRef(ref); err != nil {
		return store.Image{}, err
	}
	img, err := tx.ImageByRef(tenant, ref)
	if proto.CodeOf(err) != proto.NotFound {
		return img, err
	}
	public, err := tx.PublicImagesByRef(ref)
	if err != nil {
		return store.Image{}, err
	}
	if len(public) == 0 {
		return store.Image{}, proto.Errorf(proto.NotFound, "no image %s in tenant %q or among the public images", ref, tenant).WithPath("ref")
	}
	platformFirst := func(img store.Image) int {
		if img.Tenant == store.RootTenant {
			return 0
		}
		return 1
	}
	return slices.MinFunc(public, func(a, b store.Image) int {
		return cmp.Or(cmp.Compare(platformFirst(a), platformFirst(b)), a.PromotedAt.Compare(b.PromotedAt), cmp.Compare(a.ID, b.ID))
	}), nil
}
