package drivers

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
)

// TestRegistry: each driver is reachable by its name and checks its configuration, and
// the drivers are exactly those the registry lets an enrolment name (proto.BMCDrivers).
func TestRegistry(t *testing.T) {
	if names := slices.Sorted(maps.Keys(Registry())); !slices.Equal(names, slices.Sorted(slices.Values(proto.BMCDrivers))) {
		t.Errorf("drivers %v, but enrolments may name %v", names, proto.BMCDrivers)
	}
	for _, name := range proto.BMCDrivers {
		_, err := Registry().Open(context.Background(), name, bmc.Config{Address: "http://bmc.example"}, bmc.Env{})
		if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != "address" {
			t.Errorf("%s with a bad address: %v", name, err)
		}
	}
	if _, err := Registry().Open(context.Background(), "ipmi", bmc.Config{}, bmc.Env{}); proto.CodeOf(err) != proto.InvalidConfig {
		t.Errorf("ipmi: %v", err)
	}
}
