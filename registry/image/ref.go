package image

import (
	"regexp"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// The charset of refs: lower-case letters, digits, '.', '_' and '-', starting with a
// letter or a digit; a name of at most 128 characters and a version of at most 64.
var (
	refName    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	refVersion = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
)

// Ref names an image of the catalog: name@version, unique per tenant.
type Ref struct {
	Name, Version string
}

func (r Ref) String() string { return r.Name + "@" + r.Version }

// ParseRef reads name@version, refusing anything outside the charset with
// INVALID_INPUT at the path "ref".
func ParseRef(s string) (Ref, error) {
	name, version, ok := strings.Cut(s, "@")
	if !ok {
		return Ref{}, proto.Errorf(proto.InvalidInput, "image ref %q: write name@version, for example ubuntu-24.04-server@2026.09", s).WithPath("ref")
	}
	if !refName.MatchString(name) {
		return Ref{}, proto.Errorf(proto.InvalidInput, "image ref %q: the name must be 1 to 128 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", s).WithPath("ref")
	}
	if !refVersion.MatchString(version) {
		return Ref{}, proto.Errorf(proto.InvalidInput, "image ref %q: the version must be 1 to 64 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", s).WithPath("ref")
	}
	return Ref{Name: name, Version: version}, nil
}

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
