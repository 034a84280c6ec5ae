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
// counts as skipped. A run on fewer GPUs than the node's inventory lists fails
// (fewerGPUs).
func (s *Service) diagDCGM(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	optional := false
	var gpus json.RawMessage
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		pool, err := tx.Pool(a.Node.Tenant, a.Node.Pool)
		if err != nil {
			return err
		}
		optional = a.Run.Kind == string(Commission) && !pool.Policy.RequireGPUs
		sec, _, err := tx.InventorySection(a.Node.ID, proto.SectionGPUs)
		gpus = sec.Data
		return err
	})
	if err != nil {
		return nil, err
	}
	var list []json.RawMessage
	listed := gpus != nil && json.Unmarshal(gpus, &list) == nil
	if optional && listed && len(list) == 0 {
		return nil, workflow.Skip(fmt.Sprintf("the machine reports no GPU, and pool %s does not require GPUs (policy.requireGpus)", a.Node.Pool))
	}
	out, err := a.Relay(ctx, a.Step.On, "", a.Step.Use, a.Step.With)
	if err == nil {
		if listed {
			err = fewerGPUs(out, len(list))
		}
		if err != nil {
			s.cfg.Log.Warn("diag.dcgm: the run was on fewer GPUs than the inventory lists", "node", a.Node.ID, "err", err)
			return nil, err
		}
		return out, nil
	}
	if e := proto.AsError(err); optional && e.Code == proto.Unsupported && e.Details.Reason == proto.ReasonNoGPU {
		return nil, workflow.Skip(fmt.Sprintf("the machine has no GPU (%s), and pool %s does not require GPUs (policy.requireGpus)", e.Message, a.Node.Pool))
	}
	return nil, err
}

// fewerGPUs refuses out, a diag.dcgm result registry/attest passed, when the agent found
// fewer NVIDIA GPUs on PCI (its gpus; left out, 1) than inventoried, the machine's
// inventory lists (the gpus section its agent reported, the same PCI functions): the
// registry judged each GPU of the run, and a GPU gone from PCI since the inventory was
// taken (a card fallen off the bus, surprise-removed after a PCIe error) is in no run, so
// the run would pass a machine short of a GPU.
func fewerGPUs(out json.RawMessage, inventoried int) error {
	var r proto.DCGMResult
	if err := json.Unmarshal(out, &r); err != nil {
		return proto.Errorf(proto.Internal, "diag.dcgm: the stored result does not decode: %v", err)
	}
	if ran := max(r.GPUs, 1); ran < inventoried {
		return proto.Errorf(proto.DriverError, "diag.dcgm: the run was on the %d NVIDIA GPU(s) the machine has on PCI, and its inventory lists %d: a GPU is gone from the bus since, and was not tested",
			ran, inventoried).WithReason(proto.ReasonTestsFailed)
	}
	return nil
}
