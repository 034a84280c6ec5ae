package ramdisk

import (
	"slices"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// TestHandlersRunTheRolesKinds: the ramdisk has a handler only for kinds the registry
// relays to its role (proto.RelayRoles), so no command the relay refuses it, and no
// kind the relay does not know, reaches one of its handlers.
func TestHandlersRunTheRolesKinds(t *testing.T) {
	for kind := range (&agent{}).handlers(nil) {
		if roles, _ := proto.RelayRoles(kind); !slices.Contains(roles, proto.RoleRamdisk) {
			t.Errorf("a handler for %s, which the registry relays to %v", kind, roles)
		}
	}
}
