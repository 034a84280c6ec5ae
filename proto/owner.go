package proto

import (
	"strings"
)

// ValidTenantName reports whether s has the shape of a tenant id (IsObjectName).
func ValidTenantName(s string) bool { return IsObjectName(s) }

// SplitOwner reads a name that may be qualified by the tenant that owns it, TENANT/NAME
// (acme/gpu-host, acme/os@1): it returns the tenant and the name, or "" and s itself
// when s holds no "/". Neither profile ids nor image refs may hold a "/", so the two
// spellings cannot collide. A "/" after something that is not a tenant id is
// INVALID_INPUT; the name after it is the caller's to check.
func SplitOwner(s string) (owner, name string, err error) {
	owner, name, ok := strings.Cut(s, "/")
	if !ok {
		return "", s, nil
	}
	if !ValidTenantName(owner) {
		return "", "", Errorf(InvalidInput, "a name with a / is TENANT/NAME, and the part before the / is not a tenant id (1 to 63 lower-case letters, digits and hyphens, starting with a letter)")
	}
	return owner, name, nil
}
