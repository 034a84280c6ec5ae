package workflow

import (
	"context"
	"encoding/json"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// Handler runs one attempt of a step in the registry and returns the step's result. An
// error that is not a *proto.Error counts as INTERNAL. A handler that waits must return
// when ctx ends: that is the attempt's timeout, or the registry stopping.
type Handler func(ctx context.Context, a *Attempt) (json.RawMessage, error)

// Attempt is one try of a step, as a handler sees it.
type Attempt struct {
	// Run is the run as it was when the attempt started.
	Run store.Run
	// Node is the node the run is for, as it was when the attempt started.
	Node store.Node
	// Step is the step being tried: the fallback's own fields when Fallback is set.
	Step     profile.RenderedStep
	Fallback bool
	// CommandID is the attempt's id: the same when a restarted registry resumes it.
	CommandID string
	// StartedAt is when the attempt started (before any restart).
	StartedAt time.Time
	// BootID is the boot id of the machine's agent that had joined last when the attempt
	// started (store.Attempt.BootID): what a wait for the machine's next boot passes to
	// Joins.WaitJoined.
	BootID string
	plan   plan
	engine *Engine
}

// Profile returns the profile the run was started with; INTERNAL when its document no
// longer defines (the checks grew stricter since), which only a run that froze its
// steps runs on with.
func (a *Attempt) Profile() (*profile.Profile, error) { return a.plan.profile, a.plan.undefined }

// Update runs fn in a store transaction that commits only while this registry drives
// the attempt's run (it holds the run's claim: fence) and the attempt is still its
// step's open one: a registry that lost the run (paused past its claim's expiry, or the
// earlier run of a restarted registry) writes nothing of what the step does (when a
// power action stopped the machine, a node's BMC MACs, its TPM, its user data and join
// token) once the run went on without it, as it writes nothing of the run. A handler
// makes its writes through it. Refused, it is errClaimLost (the run's drive stops here)
// or INVALID_STATE.
func (a *Attempt) Update(fn func(*store.Tx) error) error {
	e := a.engine
	return e.cfg.Store.Update(func(tx *store.Tx) error {
		if err := e.fence(tx, a.Run.ID); err != nil {
			return err
		}
		run, err := tx.Run(a.Run.ID)
		if err != nil {
			return err
		}
		if !attemptOpen(run, a.CommandID) {
			return proto.Errorf(proto.InvalidState, "attempt %s of workflow %s has ended, or the workflow has: its step writes nothing more", a.CommandID, run.ID)
		}
		return fn(tx)
	})
}

// attemptOpen reports whether run, running, has the attempt id open at one of its steps.
func attemptOpen(run store.Run, id string) bool {
	if run.State != store.RunRunning {
		return false
	}
	for _, s := range run.Steps {
		if s.AttemptOpen() && s.Attempts[len(s.Attempts)-1].CommandID == id {
			return true
		}
	}
	return false
}

// Relay sends a command to the agent of role for this attempt's node and returns its
// answer. sub tells apart the commands of one attempt ("" for a step's one command); the
// command id is the attempt's with sub appended, so a resumed attempt resends the same
// ids, and with them what they were stored with (RelayMade): input, made again when the
// attempt resumes, is relayed only when no command of the id is stored. A step that
// reads the answer by its input (a nonce), or whose input costs something to make (a
// join token), relays with RelayMade. A guard registered with GuardRelays may refuse it
// first.
func (a *Attempt) Relay(ctx context.Context, role, sub, kind string, input json.RawMessage) (json.RawMessage, error) {
	_, out, err := a.RelayMade(ctx, role, sub, kind, func() (CommandInput, error) { return CommandInput{Payload: input}, nil })
	return out, err
}

// RelayMade is Relay of a command whose input the step makes anew each time it runs (a
// join token, a nonce, a credential sealed around a secret the registry keeps):
// makeInput is called only when no command of the id is stored. Once one is (this
// attempt relayed it before the registry restarted, or at a replica that drove the run
// before), the command is relayed with what it was stored with, pending or answered, so
// that the agent, which may be running it already, is asked exactly what it was asked
// before, and makeInput is not called. Once ctx has ended, a command not stored is
// neither made nor relayed: RelayMade returns ctx's cause. It returns what the command
// carried, by which the step reads the answer (the nonce a quote must be over), and the
// answer.
func (a *Attempt) RelayMade(ctx context.Context, role, sub, kind string, makeInput func() (CommandInput, error)) (CommandInput, json.RawMessage, error) {
	e := a.engine
	if e.cfg.Relay == nil {
		return CommandInput{}, nil, proto.Errorf(proto.Unsupported, "%s runs on the %s agent, and this registry has no agent relay", kind, role)
	}
	for _, g := range e.guards {
		if err := g(ctx, a, role); err != nil {
			return CommandInput{}, nil, err
		}
	}
	target, id := relayTarget(a.Run.ID, a.Node, a.Step, role), subCommandID(a.CommandID, sub)
	in, stored, err := e.cfg.Relay.Stored(ctx, target, id)
	switch {
	case err == nil && !stored && ctx.Err() != nil:
		// The attempt is over (timed out, or resumed after its timeout to read the
		// answers stored): a command not stored yet is never made or sent.
		return CommandInput{}, nil, context.Cause(ctx)
	case err == nil && !stored:
		in, err = makeInput()
	}
	if err != nil {
		return CommandInput{}, nil, err
	}
	e.cfg.Log.Info("relaying", "workflow", a.Run.ID, "node", a.Node.ID, "command", id, "kind", kind, "role", role)
	out, err := e.cfg.Relay.Relay(ctx, target, id, kind, in)
	return in, out, err
}
