package image

import (
	"github.com/better-compute/better-compute/proto"
)

// Ref names an image of the catalog: name@version, unique per tenant. Its shape is
// proto's (ParseImageRef), so a profile names only refs the catalog can hold.
type Ref = proto.ImageRef

// ParseRef reads name@version, refusing anything outside the charset with
// INVALID_INPUT at the path "ref".
func ParseRef(s string) (Ref, error) { return proto.ParseImageRef(s) }

// ParseUseRef reads a ref as a tenant names an image it uses (a profile's image, a
// pre-warm list, images.get): name@version, or TENANT/name@version for an image of
// another tenant. It returns the tenant, "" when none is named, and the ref; anything
// else is INVALID_INPUT at "ref".
func ParseUseRef(s string) (string, Ref, error) {
	owner, name, err := proto.SplitOwner(s)
	if err != nil {
		return "", Ref{}, proto.AsError(err).WithPath("ref")
	}
	r, err := ParseRef(name)
	return owner, r, err
}
