package workflow

import (
	"context"
	"encoding/json"
	"time"

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

// Relay sends a command to the agent of role for this attempt's node and returns its
// answer. sub tells apart the commands of one attempt ("" for a step's one command); the
// command id is the attempt's with sub appended, so a resumed attempt resends the same
// ids. A guard registered with GuardRelays may refuse it first.
func (a *Attempt) Relay(ctx context.Context, role, sub, kind string, input json.RawMessage) (json.RawMessage, error) {
	for _, g := range a.engine.guards {
		if err := g(ctx, a, role); err != nil {
			return nil, err
		}
	}
	return a.engine.relay(ctx, a.Run.ID, a.Node, a.Step, role, subCommandID(a.CommandID, sub), kind, input)
}
