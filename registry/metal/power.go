package metal

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/better-compute/better-compute/clock"
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
	return out, powered(a, a.Step.With)
}

// powered records, after a power action of attempt a with input succeeded, that the
// machine's agent stopped unless the action was on: while a is its step's open attempt
// (workflow.Attempt.Update), so that a registry that lost the run never moves the moment
// past a ramdisk that joined since.
func powered(a *workflow.Attempt, input json.RawMessage) error {
	var in proto.SetPower
	if json.Unmarshal(input, &in) != nil || in.Action == proto.PowerActionOn {
		return nil
	}
	return a.Update(func(tx *store.Tx) error {
		_, err := updateNode(tx, a.Node.ID, func(n *store.Node) error { n.PoweredAt = tx.Now(); return nil })
		return err
	})
}

// ramdiskRuns reports whether the machine's agent is its ramdisk, joined since the last
// power action that stopped the machine (a commissioning or release powers it off),
// since the machine's identity epoch last moved (before, its certificate is of an
// earlier installation and refused: it is gone at once) and since run, the workflow that
// asks, began (before, its certificate is of the workflow that booted it, which ended,
// and refused, run-ended: store.Tx.CheckAgent; an inspection's ramdisk, left running, is
// booted again by the commissioning that follows), with its session open. A
// session that ended less than workflow.ReconnectGrace ago (a link blip, a registry
// restarting; a registry that stopped counts it ended no earlier than the moment it
// asked its agents back by, a refused return re-slotted included,
// workflow.Presence.ReturnBy) it waits for until then: a
// ramdisk that came back runs. It stops waiting when the machine's installed OS joins
// meanwhile: the machine runs its disk. When none runs, gone says why if one had joined
// since that power action, unless the installed OS followed it after its grace had
// passed (a deploy's kexec, long before: nothing was waited for).
func (s *Service) ramdiskRuns(ctx context.Context, node string, run store.Run) (runs bool, gone string, err error) {
	p, err := s.cfg.Joins.Presence(ctx, node, profile.Ramdisk)
	if err != nil || p.JoinedAt.IsZero() {
		return false, "", err
	}
	var n store.Node
	if err := s.cfg.Store.View(func(tx *store.Tx) (err error) { n, err = tx.Node(node); return err }); err != nil {
		return false, "", err
	}
	if p.JoinedAt.Before(n.PoweredAt) {
		return false, "", nil
	}
	if p.Current && p.JoinedAt.Before(n.IdentityEpochAt) {
		return false, fmt.Sprintf("the ramdisk that joined at %s holds a certificate of an earlier installation: the machine's identity epoch moved to %d at %s (a deploy, release or retire started), "+
			"and the registry refuses that certificate (earlier-installation)", p.JoinedAt.UTC().Format(time.RFC3339), n.IdentityEpoch, n.IdentityEpochAt.UTC().Format(time.RFC3339)), nil
	}
	if p.Current && p.JoinedAt.Before(run.CreatedAt) {
		return false, fmt.Sprintf("the ramdisk that joined at %s was booted before workflow %s began at %s: its certificate is of the workflow that booted it, which ended, "+
			"and the registry refuses it (%s)", p.JoinedAt.UTC().Format(time.RFC3339), run.ID, run.CreatedAt.UTC().Format(time.RFC3339), proto.ReasonRunEnded), nil
	}
	if wait := p.EndedAt.Add(workflow.ReconnectGrace).Sub(s.cfg.Clock.Now()); p.Current && !p.Live && wait > 0 {
		if p, err = s.ramdiskReturns(ctx, node, p, wait); err != nil {
			return false, "", err
		}
	}
	switch {
	case !p.Current && !p.Live && !p.EndedAt.Add(workflow.ReconnectGrace).After(s.cfg.Clock.Now()):
		return false, "", nil // gone long before: the machine ran its disk since (a deploy's kexec)
	case !p.Current:
		return false, fmt.Sprintf("the machine's installed OS joined at %s, after the ramdisk that joined at %s: the machine runs its disk", p.OtherJoinedAt.UTC().Format(time.RFC3339), p.JoinedAt.UTC().Format(time.RFC3339)), nil
	case p.Live:
		return true, "", nil
	case p.Recorded:
		return false, fmt.Sprintf("the ramdisk's session ended at %s and it did not come back within %s", p.EndedAt.UTC().Format(time.RFC3339), workflow.ReconnectGrace), nil
	case !p.ReturnBy.IsZero():
		return false, fmt.Sprintf("the ramdisk that joined at %s held its session with a registry that stopped and asked it to be back by %s (a return refused and tried again included), and it did not come back within %s of %s",
			p.JoinedAt.UTC().Format(time.RFC3339), p.ReturnBy.UTC().Format(time.RFC3339), workflow.ReconnectGrace, p.EndedAt.UTC().Format(time.RFC3339)), nil
	}
	return false, fmt.Sprintf("the ramdisk that joined at %s holds no session (the registry that held it stopped or died, or it opened none after its join) and it did not come back within %s of %s",
		p.JoinedAt.UTC().Format(time.RFC3339), workflow.ReconnectGrace, p.EndedAt.UTC().Format(time.RFC3339)), nil
}

// ramdiskReturns waits up to wait on the registry's clock for node's ramdisk, whose
// Presence was p, to hold a session again or to be followed by the machine's installed
// OS (workflow.Joins.WaitReturn), and returns its Presence then: p when the wait ran out.
func (s *Service) ramdiskReturns(ctx context.Context, node string, p workflow.Presence, wait time.Duration) (workflow.Presence, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if clock.Sleep(wctx, s.cfg.Clock, wait) == nil {
			cancel()
		}
	}()
	back, err := s.cfg.Joins.WaitReturn(wctx, node, profile.Ramdisk)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		return p, nil // the wait ran out
	}
	return back, err
}
