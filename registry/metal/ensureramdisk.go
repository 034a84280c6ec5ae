package metal

import (
	"context"
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// ramdiskBoot is what metal.ensureRamdisk relays to the site, in order: one-time PXE,
// the ramdisk's boot entry (its input made by relayPrepare), a power cycle.
var ramdiskBoot = []struct {
	sub, kind string
	input     json.RawMessage
}{
	{"pxe", "management.setBootDevice", json.RawMessage(`{"device":"pxe","persistent":false}`)},
	{"prepare", proto.CommandPrepareRamdisk, nil},
	{"cycle", "power.setPower", json.RawMessage(`{"action":"cycle"}`)},
}

// ensureRamdisk is metal.ensureRamdisk: nothing when the machine's ramdisk is its agent
// already (joined since the machine was last powered off or cycled); otherwise it boots the machine into the ramdisk through the site agent and
// waits for the ramdisk to join. A pool whose machines run no agent cannot, and is
// UNSUPPORTED.
func (s *Service) ensureRamdisk(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	var pool store.Pool
	err := s.cfg.Store.View(func(tx *store.Tx) (err error) { pool, err = tx.Pool(a.Node.Tenant, a.Node.Pool); return err })
	if err != nil {
		return nil, err
	}
	if pool.Policy.Agent == store.AgentNone {
		return nil, proto.Errorf(proto.Unsupported, "pool %s runs no agent (agent: none): its machines cannot boot the ramdisk", pool.Name)
	}
	connected, err := s.ramdiskRuns(ctx, a.Node.ID)
	if err != nil {
		return nil, err
	}
	if connected {
		return json.RawMessage(`{"booted":false}`), nil
	}
	for _, c := range ramdiskBoot {
		var err error
		if c.kind == proto.CommandPrepareRamdisk {
			_, err = s.relayPrepare(ctx, a, c.sub)
		} else if _, err = a.Relay(ctx, profile.Site, c.sub, c.kind, c.input); err == nil && c.kind == "power.setPower" {
			err = s.powered(a.Node.ID, c.input)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := s.cfg.Joins.WaitJoined(ctx, a.Node.ID, profile.Ramdisk, a.StartedAt); err != nil {
		return nil, err
	}
	return json.RawMessage(`{"booted":true}`), nil
}
