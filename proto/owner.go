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

// HoldingMost is the tenant whose holdings a bounded store shared by tenants gives up
// when tenant adds one: of held (each tenant's count), the tenant holding the most, ties
// going to tenant and between others to the first by name. A tenant that adds over and
// over thus gives up its own, never what a tenant holding fewer holds.
func HoldingMost(held map[string]int, tenant string) string {
	most := tenant
	for t, n := range held {
		if n > held[most] || n == held[most] && most != tenant && t < most {
			most = t
		}
	}
	return most
}
