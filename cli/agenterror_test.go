package cli_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode"

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

// TestAnAgentsTextCannotDriveTheOperatorsTerminal, through `serve`, a real site agent's
// session and the CLI: the site agent answers the enrollment's power.getPower with an
// error whose message holds terminal controls (OSC 52, which sets the clipboard; a clear
// screen; C1's CSI; a carriage return). Every table, the lines of --wait and the error
// on stderr print them escaped (\x1b, \u009b), so the operator's terminal runs none of
// them; the message's text around them is still there. Before, they were printed as
// they came, byte for byte.
func TestAnAgentsTextCannotDriveTheOperatorsTerminal(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "127.0.0.2/31")
	testkit.JSON(t, admin, nil, "pools", "create", "gpu", "--site", "rack-a")
	siteAgent(t, reg, "rack-a", nil, map[string]session.Handler{
		proto.CommandGetPower: func(context.Context, json.RawMessage) (json.RawMessage, error) {
			return nil, &proto.Error{Code: proto.DriverError, Message: "bmc away\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u009b31m\rall good"}
		},
	})
	var node store.Node
	testkit.JSON(t, admin, &node, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")
	failed := waitState(t, admin, node.ID, store.NodeFailed)
	for _, args := range [][]string{
		{"nodes", "get", node.ID},
		{"nodes", "events", node.ID},
		{"workflows", "get", failed.Workflow},
		{"nodes", "retry", node.ID, "--wait"},
	} {
		res := testkit.CLI(t, admin, args...)
		for name, out := range map[string]string{"stdout": res.Stdout, "stderr": res.Stderr} {
			if i := strings.IndexFunc(out, func(r rune) bool { return unicode.IsControl(r) && r != '\t' && r != '\n' }); i >= 0 {
				t.Errorf("%v: its %s holds the control %U at %d:\n%q", args, name, []rune(out[i:])[0], i, out)
			}
		}
		if !strings.Contains(res.Stdout+res.Stderr, `bmc away\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u009b31m\x0dall good`) {
			t.Errorf("%v does not show the agent's message escaped:\n%s%s", args, res.Stdout, res.Stderr)
		}
	}
}
