package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// TestCancelEndsTheSiteCommand, through `serve` and the CLI: a node's BMC never reaches
// the power state its enrollment's power.getPower waits for (the site's handler waits
// until its context ends). The site runs the command under its step's timeout (the
// registry copies the step's timeout into the site command). `nodes cancel` fails the
// node with reason cancelled, and ends the command at the site: its handler's context
// is cancelled, not left to run to its deadline.
func TestCancelEndsTheSiteCommand(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "127.0.0.2/31")
	testkit.JSON(t, admin, nil, "pools", "create", "gpu", "--site", "rack-a")
	left, ended := make(chan time.Duration, 1), make(chan error, 1)
	siteAgent(t, reg, "rack-a", nil, map[string]session.Handler{
		proto.CommandGetPower: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
			d, _ := ctx.Deadline() // none: the zero time, long past
			tell(left, time.Until(d))
			<-ctx.Done()
			tell(ended, ctx.Err())
			return nil, ctx.Err()
		},
	})
	var step api.Rendering
	testkit.JSON(t, admin, &step, "profiles", "render", "metal-enroll")
	timeout := time.Duration(step.Steps[0].TimeoutSeconds) * time.Second
	if step.Steps[0].Use != proto.CommandGetPower || timeout <= 0 {
		t.Fatalf("metal-enroll's first step: %+v", step.Steps[0])
	}

	var node store.Node
	testkit.JSON(t, admin, &node, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")
	select {
	case l := <-left:
		if l <= 0 || l > timeout {
			t.Errorf("the site runs power.getPower with %v left, want within its step's timeout of %v", l, timeout)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("power.getPower never reached the site")
	}
	res := testkit.CLI(t, admin, "nodes", "cancel", node.ID, "--wait")
	if res.Code != 1 || !strings.Contains(res.Stdout, "node "+node.ID+" is failed") {
		t.Errorf("nodes cancel --wait: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	testkit.JSON(t, admin, &node, "nodes", "get", node.ID)
	if f := node.Failure; node.State != store.NodeFailed || f == nil || f.Error.Details.Reason != proto.ReasonCancelled {
		t.Errorf("cancelled node %s, %+v", node.State, node.Failure)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the site's power.getPower ended with %v, want its context cancelled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled workflow's power.getPower still runs at the site")
	}
}

// tell sends v on c unless c is full (a second run is not the one the test follows).
func tell[T any](c chan T, v T) {
	select {
	case c <- v:
	default:
	}
}
