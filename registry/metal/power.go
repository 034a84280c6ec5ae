package metal

import (
	"context"
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// setPower is power.setPower: relayed to the site as it is; once an action other than
// on succeeded, whatever ran on the machine stopped, and the node records when.
func (s *Service) setPower(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	out, err := a.Relay(ctx, a.Step.On, "", a.Step.Use, a.Step.With)
	if err != nil {
		return nil, err
	}
	return out, s.powered(a.Node.ID, a.Step.With)
}

// powered records, after a power action with input succeeded, that the machine's
// agent stopped unless the action was on.
func (s *Service) powered(node string, input json.RawMessage) error {
	var in proto.SetPower
	if json.Unmarshal(input, &in) != nil || in.Action == proto.PowerActionOn {
		return nil
	}
	return s.cfg.Store.Update(func(tx *store.Tx) error {
		_, err := updateNode(tx, node, func(n *store.Node) error { n.PoweredAt = tx.Now(); return nil })
		return err
	})
}

// ramdiskRuns reports whether the machine's agent is its ramdisk, joined since the last
// power action that stopped the machine (a commissioning or release powers it off).
func (s *Service) ramdiskRuns(ctx context.Context, node string) (bool, error) {
	connected, err := s.cfg.Joins.Connected(ctx, node, profile.Ramdisk)
	if err != nil || !connected {
		return false, err
	}
	err = s.cfg.Store.View(func(tx *store.Tx) error {
		n, err := tx.Node(node)
		if err != nil {
			return err
		}
		joins, err := tx.AgentJoins(node)
		connected = !joins[profile.Ramdisk].JoinedAt.Before(n.PoweredAt)
		return err
	})
	return connected, err
}
