package workflow

import (
	"cmp"
	"context"
	"encoding/json"

	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// Relay delivers a step's command to an agent and returns the agent's answer: its
// result, or its error as a *proto.Error. It must be idempotent by command id: a
// command sent again under the same id (a registry that restarted mid-step) returns the
// stored answer and is never run twice. When ctx ends first, its cause (context.Cause)
// says why: a *proto.Error (the step timed out: TIMEOUT; its run was cancelled:
// INVALID_STATE reason cancelled) withdraws the command, which is then never sent, and
// which the agent running it cancels; any other (the engine stopping, the run's claim
// taken by another registry) leaves it pending for the next Relay of the same id, so
// that it still runs at most once. A pending command asked for again must carry what it
// was stored with, or it is CONFLICT: its agent may be running it already.
type Relay interface {
	Relay(ctx context.Context, target RelayTarget, commandID, kind string, in CommandInput) (json.RawMessage, error)
	// Stored is what the command commandID for target was stored with, pending or
	// answered: by this attempt before the registry restarted, or at the replica that
	// drove it before; ok is false when none is stored (never relayed, or forgotten a
	// day after it was made).
	Stored(ctx context.Context, target RelayTarget, commandID string) (in CommandInput, ok bool, err error)
	// Recorded is told, in tx, the transaction in which run recorded at step what
	// attempt made of the answers of the commands it relayed for node (the attempt
	// ended, or awaits the machine's rejoin with its result): no step asks for those
	// commands again, so the relay may keep of the answered ones only what spends their
	// ids (store.Tx.RecordAgentCommands). Its error fails the transaction.
	Recorded(tx *store.Tx, node store.Node, attempt, run, step string) error
	// Agents are the agents whose commands the relay stores node's under (the store's
	// agent-commands, keyed by agent): its own, and its site's when it has one. A run's
	// end drops its commands still pending there (store.Tx.DropPendingAgentCommands),
	// reading only those.
	Agents(node store.Node) []string
}

// CommandInput is what a step relays with a command: the payload its agent gets, and
// what the registry keeps beside it to read the answer by, which no agent gets.
type CommandInput struct {
	Payload json.RawMessage
	// Kept is stored with the command and never sent (store.AgentCommand.Kept): the
	// digest of the secret a tpm.activate's credential seals.
	Kept json.RawMessage
}

// RelayTarget is the agent a command goes to. For role site it is the site agent of
// SiteID, and the command acts on the machine NodeID (through its BMC or boot entry);
// for role ramdisk or node it is that agent of NodeID itself.
type RelayTarget struct {
	NodeID string
	SiteID string
	Role   string
	// Run is the workflow run the command is for.
	Run string
	// Step is the use of the step the command is for: a command whose kind is the
	// step's use is the operation the profile names itself; another is one a handler
	// sends for its own step (metal.ensureRamdisk's power cycle).
	Step string
	// TimeoutSeconds is the step's timeout: a site agent runs the command at most this
	// long (proto.SiteCommand).
	TimeoutSeconds int64
}

// relayStep is the handler of every step without one of its own: it relays the step,
// named by its use, with its input, to where it runs.
func relayStep(ctx context.Context, a *Attempt) (json.RawMessage, error) {
	return a.Relay(ctx, a.Step.On, "", a.Step.Use, a.Step.With)
}

// relayTarget is where a command of step of run goes for role: node's own agent, or its
// site's.
func relayTarget(run string, node store.Node, step profile.RenderedStep, role string) RelayTarget {
	target := RelayTarget{NodeID: node.ID, Role: role, Run: run, Step: step.Use, TimeoutSeconds: step.TimeoutSeconds}
	if role == profile.Site {
		target.SiteID = node.Site
	}
	return target
}

// record is update of a change that records what the last attempt of step i made of its
// commands' answers (its end, or its result as it awaits the machine's rejoin), which
// tells the relay so in the same transaction (Relay.Recorded): a registry that stops
// before it commits resumes the attempt with its answers still stored.
func (e *Engine) record(id string, node store.Node, i int, change func(*store.Run) error) (store.Run, error) {
	return e.write(id, true, func(tx *store.Tx, r *store.Run) error {
		if err := change(r); err != nil {
			return err
		}
		return e.recorded(tx, node, r, i)
	})
}

// recordExpired is record of the TIMEOUT of an attempt resumed after its timeout ran
// out, which read nothing (expired), unless a command of the attempt holds an answer
// (store.Tx.AttemptAnswered) as the transaction reads the store: then it records
// nothing and is errAnsweredFirst. The TIMEOUT and the withdrawal of the commands still
// pending commit in one transaction, so an agent's answer is either recorded before
// it, and read, or after it, and dropped (store.Tx.CompleteAgentCommand).
func (e *Engine) recordExpired(id string, node store.Node, i int, change func(*store.Run) error) (store.Run, error) {
	return e.write(id, true, func(tx *store.Tx, r *store.Run) error {
		if e.cfg.Relay != nil {
			attempt := r.Steps[i].Attempts[len(r.Steps[i].Attempts)-1].CommandID
			for _, agent := range e.cfg.Relay.Agents(node) {
				if answered, err := tx.AttemptAnswered(agent, attempt); answered || err != nil {
					return cmp.Or(err, errAnsweredFirst)
				}
			}
		}
		if err := change(r); err != nil {
			return err
		}
		return e.recorded(tx, node, r, i)
	})
}

// recorded tells the relay, in tx, that run r records what the last attempt of its step
// i made of its commands' answers (Relay.Recorded). An attempt that ends failed first
// withdraws its commands still pending with its error (store.Tx.WithdrawAgentCommands):
// those of an attempt resumed after its timeout ran out while the registry was down,
// which fails at once without relaying, or of one a cancel abandons that no relay of
// this registry waits for. Left pending, they went to the agent as it connected, and
// ran on past the attempt's end, beside the step's retry under another id.
func (e *Engine) recorded(tx *store.Tx, node store.Node, r *store.Run, i int) error {
	if e.cfg.Relay == nil {
		return nil
	}
	s := r.Steps[i]
	a := s.Attempts[len(s.Attempts)-1]
	if !a.FinishedAt.IsZero() && a.Error != nil {
		for _, agent := range e.cfg.Relay.Agents(node) {
			if _, err := tx.WithdrawAgentCommands(agent, a.CommandID, a.Error); err != nil {
				return err
			}
		}
	}
	return e.cfg.Relay.Recorded(tx, node, a.CommandID, r.ID, s.Path())
}

// abandonStep abandons step i of cancelled run and every step after it that is not of
// the cleanup phase (store.RunStep.Abandon: those are pending, and are skipped), in one
// write rather than one a step. When that ends the attempt step i was on, the
// transaction records it as record does: the relay keeps only the digests of the
// attempt's answered commands from then on, as after any attempt's end.
func (e *Engine) abandonStep(run store.Run, i int) error {
	change := func(r *store.Run) error {
		now := e.cfg.Clock.Now()
		for _, j := range notRunFrom(*r, i) {
			r.Steps[j].Abandon(r.Cancelled.Error, notRunCancelled, now)
		}
		return nil
	}
	if !run.Steps[i].AttemptOpen() {
		_, err := e.update(run.ID, change)
		return err
	}
	node, err := e.node(run.Node)
	if err == nil {
		_, err = e.record(run.ID, node, i, change)
	}
	return err
}

// dropPending forgets, in tx, the commands of run still pending for its node's agents
// (Relay.Agents): an attempt that was abandoned or timed out left them, and none relays
// them again. It returns how many.
func (e *Engine) dropPending(tx *store.Tx, run store.Run) (int, error) {
	if e.cfg.Relay == nil {
		return 0, nil
	}
	node, err := tx.Node(run.Node)
	if err != nil {
		return 0, err
	}
	dropped := 0
	for _, agent := range e.cfg.Relay.Agents(node) {
		n, err := tx.DropPendingAgentCommands(agent, run.ID+":")
		if dropped += n; err != nil {
			return dropped, err
		}
	}
	return dropped, nil
}
