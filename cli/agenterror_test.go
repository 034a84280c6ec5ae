package cli_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// TestAnAgentsCodeOfItsOwnReachesTheCLIAsDriverError, through `serve`, a real site
// agent's session and the CLI: the site agent answers the enrollment's power.getPower
// with an error whose code is none of the project's (a code of 4 KiB of its own
// words). The node fails with DRIVER_ERROR, the code the agent sent quoted and cut in
// the message, and `nodes retry --wait --format json` prints an error object of that
// code. Before, the agent's code went through as it was: the registry stored it, and
// the CLI printed it as the error's code, outside the closed set a script matches on.
func TestAnAgentsCodeOfItsOwnReachesTheCLIAsDriverError(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "127.0.0.2/31")
	testkit.JSON(t, admin, nil, "pools", "create", "gpu", "--site", "rack-a")
	own := "NOT_MY_PROBLEM_" + strings.Repeat("X", 4<<10)
	siteAgent(t, reg, "rack-a", nil, map[string]session.Handler{
		proto.CommandGetPower: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			return nil, &proto.Error{Code: proto.Code(own), Message: "the BMC is away"}
		},
	})
	var node store.Node
	testkit.JSON(t, admin, &node, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")
	failed := waitState(t, admin, node.ID, store.NodeFailed)
	if f := failed.Failure; f == nil {
		t.Errorf("the failed node names no failure")
	} else if e := f.Error; e.Code != proto.DriverError || !strings.Contains(e.Message, `code "NOT_MY_PROBLEM_XXX`) ||
		!strings.HasSuffix(e.Message, "the BMC is away") || len(e.Message) > proto.MaxErrorMessage {
		t.Errorf("the node failed with %.200q: %.200q, want DRIVER_ERROR naming the agent's code, cut, and its message", e.Code, e.Message)
	}
	e := testkit.Fails(t, admin, "nodes", "retry", node.ID, "--wait")
	if !slices.Contains(proto.Codes, proto.Code(e.Code)) || e.Code != string(proto.DriverError) || !strings.Contains(e.Message, "the BMC is away") {
		t.Errorf("nodes retry --wait --format json printed the error %.200q (%.200q), want DRIVER_ERROR, one of the project's codes", e.Code, e.Message)
	}
}
