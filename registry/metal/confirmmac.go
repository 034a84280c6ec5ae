package metal

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// macPoll is how often metal.ensureRamdisk looks whether a node enrolled by its product
// UUID alone has its MAC bound yet.
const macPoll = time.Second

// parseMAC reads a MAC as enrollment takes it, in its canonical form (lower-case,
// colon-separated); another is INVALID_INPUT at path.
func parseMAC(m, path string) (string, error) {
	hw, err := net.ParseMAC(m)
	if err != nil || len(hw) != 6 {
		return "", proto.Errorf(proto.InvalidInput, "MAC %s: write six hex pairs, 52:54:00:12:34:56", proto.Quote(m)).WithPath(path)
	}
	return hw.String(), nil
}

// ConfirmMAC is metal.confirmMac: it binds, in tx, the MAC PXE discovery proposed for one
// of tenant's nodes enrolled by its product UUID alone, which must be mac. Another
// tenant's node is NOT_FOUND; a retired node, one with MACs already or without a
// proposal is INVALID_STATE; another MAC, or one the machine's BMC does not list among
// its NICs (when it lists any) unless force, is INVALID_INPUT at mac; a MAC another node
// holds is CONFLICT. Nothing changes on a refusal.
func (s *Service) ConfirmMAC(tx *store.Tx, tenant, nodeID, mac string, force bool) (store.Node, error) {
	node, err := tx.Node(nodeID)
	if err != nil || node.Tenant != tenant {
		return store.Node{}, proto.Errorf(proto.NotFound, "node %q not found: `nodes list` shows the tenant's nodes", nodeID).WithPath(nodeField)
	}
	if mac, err = parseMAC(mac, "mac"); err != nil {
		return node, err
	}
	if node.State == store.NodeRetired {
		return node, refusal(node, "confirm a MAC", false)
	}
	return tx.BindMAC(node.ID, mac, force)
}

// discoverBoot is what discoverMAC relays to the site, in order: one-time PXE with no
// boot entry for the machine, and a power cycle.
var discoverBoot = []siteCommand{
	{"discover-pxe", proto.CommandSetBootDevice, pxeOnce},
	{"discover-cycle", proto.CommandSetPower, powerCycle},
}

// discoverMAC is metal.ensureRamdisk's first part for a node enrolled by its product
// UUID alone: unless PXE discovery proposed a MAC already, it power-cycles the machine
// into PXE with no boot entry, so that the site agent lists it, then waits until the
// proposed MAC is bound (metal.confirmMac, or at once on a pool that trusts its
// provisioning network) and returns the node with it.
func (s *Service) discoverMAC(ctx context.Context, a *workflow.Attempt) (store.Node, error) {
	if a.Node.MACProposal == nil {
		if err := s.relaySite(ctx, a, discoverBoot); err != nil {
			return a.Node, err
		}
	}
	s.cfg.Log.Info("waiting for the MAC PXE discovery proposes to be bound: `nodes confirm-mac`", "workflow", a.Run.ID, "node", a.Node.ID)
	for {
		var node store.Node
		if err := s.cfg.Store.View(func(tx *store.Tx) (err error) { node, err = tx.Node(a.Node.ID); return err }); err != nil {
			return node, err
		}
		if len(node.MACs) > 0 {
			return node, nil
		}
		if err := clock.Sleep(ctx, s.cfg.Clock, macPoll); err != nil {
			return node, err
		}
	}
}

// maxBMCMACs bounds the MACs an inspect.oob answer records on its node (BMCMACs): a BMC
// lists a handful of NICs, a large server's a few dozen ports. An answer that lists more
// distinct ones (a BMC's fault, or whoever holds the site agent's key) fails the step,
// INVALID_INPUT at result.nics, reason too-large, and records none: before, one answer
// (up to proto.MaxStepResult) recorded thousands on the node, whose record every read
// of the node carries.
const maxBMCMACs = 64

// inspectOOB is inspect.oob: relayed to the site as it is; the MACs of the NICs the
// BMC lists, up to maxBMCMACs, are recorded on the node (BMCMACs), against which a MAC
// PXE discovery proposes is checked before it is bound.
func (s *Service) inspectOOB(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	out, err := a.Relay(ctx, a.Step.On, "", a.Step.Use, a.Step.With)
	if err != nil {
		return nil, err
	}
	var inv proto.OOBInventory
	if json.Unmarshal(out, &inv) != nil || len(inv.NICs) == 0 {
		return out, nil
	}
	var macs []string
	for _, n := range inv.NICs {
		if hw, err := net.ParseMAC(n.MAC); err == nil {
			macs = append(macs, hw.String())
		}
	}
	slices.Sort(macs)
	if macs = slices.Compact(macs); len(macs) > maxBMCMACs {
		return nil, proto.Errorf(proto.InvalidInput, "the BMC lists the MACs of %d NICs, more than the %d a machine's BMC has: none is recorded", len(macs), maxBMCMACs).
			WithPath("result.nics").WithReason(proto.ReasonTooLarge)
	}
	return out, a.Update(func(tx *store.Tx) error {
		_, err := updateNode(tx, a.Node.ID, func(n *store.Node) error { n.BMCMACs = macs; return nil })
		return err
	})
}
