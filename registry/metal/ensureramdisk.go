package metal

import (
	"context"
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// stepEnsureRamdisk is the step that boots the machine into the ramdisk.
const stepEnsureRamdisk = proto.StepEnsureRamdisk

// siteCommand is one command a step of metal relays to the node's site: its sub-command
// name within the step, its kind and its input.
type siteCommand struct {
	sub, kind string
	input     json.RawMessage
}

// ramdiskBoot is what metal.ensureRamdisk relays to the site, in order: one-time PXE,
// the ramdisk's boot entry (its input made by relayPrepare), a power cycle.
var ramdiskBoot = []siteCommand{
	{"pxe", proto.CommandSetBootDevice, pxeOnce},
	{"prepare", proto.CommandPrepareRamdisk, nil},
	{"cycle", proto.CommandSetPower, powerCycle},
}

// relaySite relays cmds to the node's site in order, stopping at the first that fails:
// a ramdisk boot entry through relayPrepare, and a power change recorded once done.
func (s *Service) relaySite(ctx context.Context, a *workflow.Attempt, cmds []siteCommand) error {
	for _, c := range cmds {
		var err error
		if c.kind == proto.CommandPrepareRamdisk {
			_, err = s.relayPrepare(ctx, a, c.sub)
		} else if _, err = a.Relay(ctx, profile.Site, c.sub, c.kind, c.input); err == nil && c.kind == proto.CommandSetPower {
			err = powered(a, c.input)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// The inputs of the site commands that boot a machine into PXE: a one-time PXE boot
// device, then a power cycle.
var (
	pxeOnce    = mustJSON(proto.SetBootDevice{Device: proto.BootDevicePXE})
	powerCycle = mustJSON(proto.SetPower{Action: proto.PowerActionCycle})
)

// ensureRamdisk is metal.ensureRamdisk: nothing when the machine's ramdisk is its agent
// already (joined since the machine was last powered off or cycled, since its identity
// epoch moved and since this run began, its session open or back within
// workflow.ReconnectGrace of its end: ramdiskRuns); otherwise it boots the
// machine into the ramdisk through the site agent and waits for a ramdisk of the boot
// that follows to join. A
// ramdisk that had joined but is gone is booted again, and the result says why.
// A machine known only by its product UUID first gets its MAC (discoverMAC). A pool
// whose machines run no agent cannot, and is UNSUPPORTED.
func (s *Service) ensureRamdisk(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	var pool store.Pool
	err := s.cfg.Store.View(func(tx *store.Tx) (err error) { pool, err = tx.Pool(a.Node.Tenant, a.Node.Pool); return err })
	if err != nil {
		return nil, err
	}
	if pool.Policy.Agent == store.AgentNone {
		return nil, proto.Errorf(proto.Unsupported, "pool %s runs no agent (agent: none): its machines cannot boot the ramdisk", pool.Name)
	}
	runs, gone, err := s.ramdiskRuns(ctx, a.Node.ID, a.Run)
	if err != nil {
		return nil, err
	}
	if runs {
		return proto.Marshal(proto.EnsureRamdiskResult{Booted: false})
	}
	if gone != "" {
		s.cfg.Log.Info("booting the machine into the ramdisk again", "node", a.Node.ID, "workflow", a.Run.ID, "why", gone)
	}
	if len(a.Node.MACs) == 0 {
		if a.Node, err = s.discoverMAC(ctx, a); err != nil {
			return nil, err
		}
	}
	if err := s.relaySite(ctx, a, ramdiskBoot); err != nil {
		return nil, err
	}
	// A ramdisk taken for gone that still runs, connecting again before the power cycle
	// stops it, is of the boot the attempt started in: only a ramdisk of another counts.
	if err := s.cfg.Joins.WaitJoined(ctx, a.Node.ID, profile.Ramdisk, a.StartedAt, a.BootID); err != nil {
		return nil, err
	}
	return proto.Marshal(proto.EnsureRamdiskResult{Booted: true, Gone: gone})
}

// noRamdisk is the relay guard of a run whose metal.ensureRamdisk failed: a command for
// the ramdisk fails at once with UNAVAILABLE (reason no-ramdisk) unless a ramdisk runs
// on the machine after all (its session open, or back within workflow.ReconnectGrace of
// its end: ramdiskRuns), since nothing in the run booted one and the command would
// wait its step's whole timeout for it (a retire's disk.wipe, six hours) before the
// steps after it (power off, metal.revokeIdentity) run.
func (s *Service) noRamdisk(ctx context.Context, a *workflow.Attempt, role string) error {
	if role != profile.Ramdisk {
		return nil
	}
	for _, st := range a.Run.Steps {
		if st.Use != stepEnsureRamdisk || st.State != store.StepFailed {
			continue
		}
		runs, gone, err := s.ramdiskRuns(ctx, a.Node.ID, a.Run)
		if err != nil || runs {
			return err
		}
		if gone != "" {
			gone = " (" + gone + ")"
		}
		return proto.Errorf(proto.Unavailable, "%s goes to the ramdisk, and this workflow's metal.ensureRamdisk (%s) failed: no ramdisk runs on the machine to take it%s",
			a.Step.Use, st.Path(), gone).WithReason(proto.ReasonNoRamdisk)
	}
	return nil
}
