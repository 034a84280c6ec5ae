package metal

import (
	"context"
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// RamdiskBoots makes what one ramdisk boot of a machine needs.
type RamdiskBoots interface {
	// Prepare mints the single-use ramdisk join token of node's next boot and returns
	// boot.prepareRamdisk's input: the machine's identity, the token, the registry's URL
	// and pins.
	Prepare(ctx context.Context, node store.Node) (proto.PrepareRamdisk, error)
}

// prepareRamdisk is boot.prepareRamdisk: it mints the ramdisk's join token and relays
// the boot entry's ingredients to the site agent.
func (s *Service) prepareRamdisk(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	return s.relayPrepare(ctx, a, "")
}

// relayPrepare relays boot.prepareRamdisk under sub. The token is minted anew on every
// try; a resent command keeps its first answer, and an unused token expires.
func (s *Service) relayPrepare(ctx context.Context, a *workflow.Attempt, sub string) (json.RawMessage, error) {
	if s.cfg.Ramdisk == nil {
		return nil, proto.Errorf(proto.Unsupported, "boot.prepareRamdisk needs ramdisk join tokens, which this registry does not mint")
	}
	in, err := s.cfg.Ramdisk.Prepare(ctx, a.Node)
	if err != nil {
		return nil, err
	}
	input, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	return a.Relay(ctx, profile.Site, sub, proto.CommandPrepareRamdisk, input)
}

// refreshInventory is inventory.refresh: it relays the enrolled identity to the agent
// the step runs on, which checks it against the machine it runs on.
func (s *Service) refreshInventory(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	input, err := json.Marshal(proto.InventoryRefresh{ProductUUID: a.Node.ProductUUID, MAC: a.Node.BoundMAC})
	if err != nil {
		return nil, err
	}
	return a.Relay(ctx, a.Step.On, "", proto.CommandInventoryRefresh, input)
}
