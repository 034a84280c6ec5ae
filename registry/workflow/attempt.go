package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// errTimedOut is the cause an attempt's context is cancelled with when its timeout runs
// out. It is a *proto.Error, TIMEOUT: a relay under way withdraws its command with it
// (Relay).
var errTimedOut error = proto.Errorf(proto.Timeout, "the step's timeout ran out")

const awaitRejoin = "rejoin"

// attempt runs one try of a step within its timeout, counted from the attempt's start
// (so a resumed attempt has what is left of it), and, for await: rejoin, waits for the
// machine's agent to join once the step's work is done: since the attempt started, and
// from a boot other than the one the attempt recorded at its start (att.BootID), so that
// the agent of before the power action or kexec connecting again does not count. It returns errStopped when ctx
// ends, errCancelled when its run is cancelled, and a skip its handler returned. An
// attempt whose timeout ran out already fails expired, running nothing, unless
// readExpired (errAnsweredFirst): then its work runs in a context ended already.
func (e *Engine) attempt(ctx context.Context, run store.Run, node store.Node, i int, pl plan, spec profile.RenderedStep, att store.Attempt, readExpired bool) (json.RawMessage, error) {
	timeout := time.Duration(spec.TimeoutSeconds) * time.Second
	left := att.StartedAt.Add(timeout).Sub(e.cfg.Clock.Now())
	timedOut := proto.Errorf(proto.Timeout, "%s did not finish within its timeout of %s", spec.Use, spec.Timeout)
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	switch {
	case left <= 0 && !readExpired:
		return nil, expired{timedOut}
	case left <= 0:
		// The store recorded an answer of the attempt before its TIMEOUT
		// (errAnsweredFirst): the work reads it, in a context ended already, in which
		// relays send nothing (Attempt.RelayMade).
		cancel(errTimedOut)
	default:
		timer := e.cfg.Clock.NewTimer(left)
		defer timer.Stop()
		go func() {
			select {
			case <-timer.C():
				cancel(errTimedOut)
			case <-actx.Done():
			}
		}()
	}
	result, err := e.work(actx, run, node, i, pl, spec, att)
	var skipped skip
	switch {
	case context.Cause(ctx) == errCancelled:
		return nil, errCancelled
	case ctx.Err() != nil:
		return nil, errStopped
	case err == nil:
		// A result the work returned as the timeout ran out is an answer the store
		// recorded before the relay's withdrawal (Relay): the agent carried the
		// command out, and a retry would run it again.
		return result, nil
	case context.Cause(actx) == errTimedOut:
		return nil, timedOut
	case errors.As(err, &skipped):
		return nil, skipped
	}
	return nil, proto.AsError(err)
}

// expired is the TIMEOUT of an attempt resumed after its timeout ran out (the registry
// was down), which ran nothing: the transaction that records it checks that no answer
// of the attempt's commands came first (recordExpired).
type expired struct{ timedOut *proto.Error }

func (x expired) Error() string { return x.timedOut.Error() }
func (x expired) Unwrap() error { return x.timedOut }

// errAnsweredFirst refuses to record an expired attempt TIMEOUT: a command of it holds
// an answer the store recorded before, which the attempt reads instead.
var errAnsweredFirst = errors.New("an answer of the attempt was recorded before its timeout")

// work is an attempt without its timeout: the step's handler, unless a previous run of
// the same attempt finished it, then the wait for the rejoin.
func (e *Engine) work(ctx context.Context, run store.Run, node store.Node, i int, pl plan, spec profile.RenderedStep, att store.Attempt) (json.RawMessage, error) {
	result := run.Steps[i].Result
	if !att.Awaiting {
		a := &Attempt{Run: run, Node: node, Step: spec, Fallback: att.Fallback, CommandID: att.CommandID, StartedAt: att.StartedAt, BootID: att.BootID, plan: pl, engine: e}
		var err error
		if result, err = e.handler(spec)(ctx, a); err != nil {
			return nil, err
		}
		if spec.Await != awaitRejoin {
			return result, nil
		}
		_, err = e.record(run.ID, node, i, func(r *store.Run) error {
			a, err := ranAttempt(r, i, att.CommandID)
			if err != nil {
				return err
			}
			a.Awaiting, r.Steps[i].Result = true, result
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if e.cfg.Joins == nil {
		return nil, proto.Errorf(proto.Unsupported, "%s awaits the machine's rejoin, and this registry does not follow joins", spec.Use)
	}
	return result, e.cfg.Joins.WaitJoined(ctx, node.ID, awaitRole(spec), att.StartedAt, att.BootID)
}

// awaitRole is the agent a step's rejoin waits for: the installed OS's after boot.kexec,
// whichever agent the machine boots after a power action.
func awaitRole(spec profile.RenderedStep) string {
	if spec.Use == proto.CommandBootKexec {
		return profile.Node
	}
	return ""
}

// handler returns what runs a step: its registered handler, else the relay for a
// relayed step; a control-plane step without a handler is UNSUPPORTED.
func (e *Engine) handler(spec profile.RenderedStep) Handler {
	if h, ok := e.handlers[spec.Use]; ok {
		return h
	}
	if spec.On != profile.ControlPlane {
		return relayStep
	}
	return func(context.Context, *Attempt) (json.RawMessage, error) {
		return nil, proto.Errorf(proto.Unsupported, "%s runs in the registry, and this registry has no handler for it", spec.Use)
	}
}
