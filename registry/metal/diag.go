package metal

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// diagDCGM relays diag.dcgm. In commissioning, on a pool whose policy does not require
// GPUs, a machine without GPU skips it: one whose agent reported an empty gpus
// inventory section is not asked, and one that answers UNSUPPORTED with reason no-gpu
// counts as skipped.
func (s *Service) diagDCGM(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	optional := false
	if a.Run.Kind == string(Commission) {
		var gpus json.RawMessage
		err := s.cfg.Store.View(func(tx *store.Tx) error {
			pool, err := tx.Pool(a.Node.Tenant, a.Node.Pool)
			if err != nil {
				return err
			}
			optional = !pool.Policy.RequireGPUs
			inv, err := tx.Inventory(a.Node.ID)
			for _, sec := range inv {
				if sec.Section == proto.SectionGPUs {
					gpus = sec.Data
				}
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		var list []json.RawMessage
		if optional && gpus != nil && json.Unmarshal(gpus, &list) == nil && len(list) == 0 {
			return nil, workflow.Skip(fmt.Sprintf("the machine reports no GPU, and pool %s does not require GPUs (policy.requireGpus)", a.Node.Pool))
		}
	}
	out, err := a.Relay(ctx, a.Step.On, "", a.Step.Use, a.Step.With)
	if err == nil {
		return out, nil
	}
	if e := proto.AsError(err); optional && e.Code == proto.Unsupported && e.Details.Reason == proto.ReasonNoGPU {
		return nil, workflow.Skip(fmt.Sprintf("the machine has no GPU (%s), and pool %s does not require GPUs (policy.requireGpus)", e.Message, a.Node.Pool))
	}
	return nil, err
}
