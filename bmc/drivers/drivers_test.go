package drivers

import (
	"context"
	"testing"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
)

// TestRegistry: each driver is reachable by its name and checks its configuration.
func TestRegistry(t *testing.T) {
	for _, name := range []string{"redfish", "qmp"} {
		_, err := Registry().Open(context.Background(), name, bmc.Config{Address: "http://bmc.example"}, bmc.Env{})
		if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != "address" {
			t.Errorf("%s with a bad address: %v", name, err)
		}
	}
	if _, err := Registry().Open(context.Background(), "ipmi", bmc.Config{}, bmc.Env{}); proto.CodeOf(err) != proto.InvalidConfig {
		t.Errorf("ipmi: %v", err)
	}
}
