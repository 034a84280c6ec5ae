package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
)

const bucketAgentCommands = "agent-commands"

// AgentCommand is a command relayed to a node's agent, kept from the moment it is asked
// for, so that neither a dropped link nor a registry restart loses it, and once
// answered kept with its answer, so that its id is never run again: until
// ExpireAgentCommands forgets it.
type AgentCommand struct {
	Node string `json:"node"`
	// Role is the role of the agent the command is for: only a session of Node in Role
	// gets it. Empty in a command stored by a registry before roles were kept (For).
	Role    proto.Role      `json:"role,omitempty"`
	ID      string          `json:"id"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// Tenant is the tenant whose machine a site agent's command acts on, and
	// TimeoutSeconds its step's timeout (proto.Command).
	Tenant         string `json:"tenant,omitempty"`
	TimeoutSeconds int64  `json:"timeoutSeconds,omitempty"`
	// Kept is what the registry that relayed the command keeps beside it to read its
	// answer by, which no agent gets (Command leaves it out): the digest of the secret a
	// tpm.activate's credential seals, which the answer must be. Kept with the command
	// so that a step resumed under its id reads the answer as the step that sent it
	// would have.
	Kept      json.RawMessage `json:"kept,omitempty"`
	CreatedAt time.Time       `json:"createdAt"`
	// Done is set once the agent answered, with its Result or Error.
	Done   bool            `json:"done,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *proto.Error    `json:"error,omitempty"`
	DoneAt time.Time       `json:"doneAt,omitzero"`
	// Recorded is set once the workflow run whose step relayed the command recorded
	// what it made of the answer (RecordAgentCommands): the payload, Kept and the answer
	// are dropped then, and only their digests kept, so that a day of answers fits the
	// store while the id still never runs again. Nil in a command answered but not
	// recorded yet, relayed outside a run, or stored by an older registry.
	Recorded *CommandRecorded `json:"recorded,omitempty"`
}

// CommandRecorded is what an answered command keeps once its run recorded what it made
// of the answer: where, when, and the SHA-256 of what the command carried and of its
// answer (the result, or the error as JSON), by which a copy kept elsewhere is told
// to be the one.
type CommandRecorded struct {
	Workflow string    `json:"workflow"`
	Step     string    `json:"step"`
	At       time.Time `json:"at"`
	// PayloadSHA256 is the digest of the payload as stored (compact JSON); empty when
	// the command had none.
	PayloadSHA256 []byte `json:"payloadSha256,omitempty"`
	AnswerSHA256  []byte `json:"answerSha256"`
	// ErrorCode is the code of the agent's error when the command was answered with one.
	ErrorCode proto.Code `json:"errorCode,omitempty"`
}

// Spent is nil unless c's answer was recorded by its run and is no longer kept
// (Recorded): then it is INVALID_STATE naming the run and step that recorded it, which
// is where to read it; the id is spent, and a command to run again needs a new one.
func (c AgentCommand) Spent() error {
	if c.Recorded == nil {
		return nil
	}
	return proto.Errorf(proto.InvalidState, "command %s (%s) of %s was answered at %s, and workflow %s recorded its answer at %s, so the store keeps only its digest: read the outcome there (workflows get %s), or relay the command under a new id",
		c.ID, c.Kind, c.Node, c.DoneAt.UTC().Format(time.RFC3339), c.Recorded.Workflow, c.Recorded.Step, c.Recorded.Workflow).WithPath("id")
}

// Command is the command as it goes on the wire.
func (c AgentCommand) Command() proto.Command {
	return proto.Command{ID: c.ID, Kind: c.Kind, Payload: c.Payload, Tenant: c.Tenant, TimeoutSeconds: c.TimeoutSeconds}
}

// Deadline is when the command's step times out: CreatedAt plus TimeoutSeconds; ok is
// false for a command that names no timeout.
func (c AgentCommand) Deadline() (deadline time.Time, ok bool) {
	if c.TimeoutSeconds <= 0 {
		return time.Time{}, false
	}
	return c.CreatedAt.Add(time.Duration(c.TimeoutSeconds) * time.Second), true
}

// For reports whether the command goes to an agent of role: one of its own role, or,
// for a command stored without one by an older registry, an agent of a role that runs
// its kind (proto.RelayRoles: an installed OS's agent never gets a ramdisk's disk.wipe
// that way either), as that registry sent it otherwise (until the workflow that relays
// it asks for it again, and its role is recorded: EnqueueAgentCommand).
func (c AgentCommand) For(role proto.Role) bool {
	if c.Role != "" {
		return c.Role == role
	}
	roles, known := proto.RelayRoles(c.Kind)
	return !known || slices.Contains(roles, role)
}

func commandKey(node, id string) []byte { return []byte(node + "/" + id) }

// OnAgentCommand registers fn to be called after every commit that enqueued, completed
// or recorded (RecordAgentCommands) a relayed command, with the command as stored, until the returned cancel is called.
// fn runs on the committing goroutine after the store's locks are released, so it must
// return quickly (signal, do not work). On etcd it also runs for every command another
// replica enqueued or completed, on the store's watch goroutine: at least once, in commit
// order. Deleting a command does not call it.
func (s *Store) OnAgentCommand(fn func(AgentCommand)) (cancel func()) {
	return s.watch.agentCommand.add(fn)
}

// EnqueueAgentCommand records a command for node's agent of role, with what its caller
// keeps beside it (AgentCommand.Kept), and returns it as stored. A command of the same
// id that exists already is returned as it is, unless its kind or role differ, or it is
// pending with another payload or kept value, which is CONFLICT: an agent may be running
// it already, so what it carries is never replaced. One stored without a role (by an
// older registry) is given role. An answered one is returned with its answer whatever
// payload it is asked with, as its agent would answer it: the id ran, and runs no more.
// One whose answer its run recorded (Recorded) is INVALID_STATE (AgentCommand.Spent):
// nothing is stored or sent, and no answer is made up. A caller that makes its input anew each time it runs (a join token, a nonce) reads
// the stored command first and relays what it carried (workflow.Attempt.RelayMade).
func (t *Tx) EnqueueAgentCommand(node string, role proto.Role, cmd proto.Command, kept json.RawMessage) (AgentCommand, error) {
	if err := proto.CheckNodeID(node); err != nil {
		return AgentCommand{}, err
	}
	if !role.Valid() {
		return AgentCommand{}, proto.Errorf(proto.InvalidInput, "the agent role %q is none of site, ramdisk, node", role).WithPath("role")
	}
	if err := proto.CheckCommandID(cmd.ID); err != nil {
		return AgentCommand{}, proto.AsError(err).WithPath("id")
	}
	if cmd.Kind == "" {
		return AgentCommand{}, proto.Errorf(proto.InvalidInput, "name the command's kind").WithPath("kind")
	}
	var payload bytes.Buffer
	if len(cmd.Payload) > 0 {
		if err := json.Compact(&payload, cmd.Payload); err != nil {
			return AgentCommand{}, proto.Errorf(proto.InvalidInput, "command payload is not JSON: %v", err).WithPath("payload")
		}
	}
	var keep bytes.Buffer
	if len(kept) > 0 {
		if err := json.Compact(&keep, kept); err != nil {
			return AgentCommand{}, proto.Errorf(proto.InvalidInput, "what is kept with the command is not JSON: %v", err).WithPath("kept")
		}
	}
	c := AgentCommand{Node: node, Role: role, ID: cmd.ID, Kind: cmd.Kind, Payload: payload.Bytes(), Tenant: cmd.Tenant, TimeoutSeconds: cmd.TimeoutSeconds,
		Kept: keep.Bytes(), CreatedAt: t.now}
	var old AgentCommand
	ok, err := t.get(bucketAgentCommands, commandKey(node, cmd.ID), &old)
	if err != nil {
		return AgentCommand{}, err
	}
	if ok {
		if err := old.Spent(); err != nil {
			return AgentCommand{}, err
		}
		if old.Kind != c.Kind || !old.Done && (!bytes.Equal(old.Payload, c.Payload) || !bytes.Equal(old.Kept, c.Kept)) || !old.For(role) {
			return AgentCommand{}, proto.Errorf(proto.Conflict, "command %q of node %q exists already for another agent, kind or payload: relay what it carries (its stored payload), or use a new id", cmd.ID, node).WithPath("id")
		}
		if old.Role == "" {
			old.Role = role
			return old, t.putAgentCommand(old)
		}
		return old, nil
	}
	return c, t.putAgentCommand(c)
}

// putAgentCommand stores c with its expiry entry, and tells the OnAgentCommand hooks of
// it after the commit. The entry is written only when it is not there already (a new
// command, or one stored before the index by a replica of an earlier release): an
// answer or a record of one changes no entry, so it does not touch the index's bucket,
// which ExpireAgentCommands walks.
func (t *Tx) putAgentCommand(c AgentCommand) error {
	if err := t.put(bucketAgentCommands, commandKey(c.Node, c.ID), c); err != nil {
		return err
	}
	if k := expiryKey(c); t.getRaw(bucketAgentCommandsByExpiry, k) == nil {
		if err := t.putRaw(bucketAgentCommandsByExpiry, k, nil); err != nil {
			return err
		}
	}
	t.store.watch.agentCommand.afterCommit(t, c)
	return nil
}

// deleteAgentCommand forgets c and its expiry entry.
func (t *Tx) deleteAgentCommand(c AgentCommand) error {
	if err := t.del(bucketAgentCommands, commandKey(c.Node, c.ID)); err != nil {
		return err
	}
	return t.del(bucketAgentCommandsByExpiry, expiryKey(c))
}

// CompleteAgentCommand records the agent's answer to a command and returns the command.
// The first answer wins: a command that is done already is returned unchanged. A command
// that is not stored (expired, or dropped) is NOT_FOUND.
func (t *Tx) CompleteAgentCommand(node string, res proto.Result) (AgentCommand, error) {
	c, err := t.AgentCommand(node, res.ID)
	if err != nil || c.Done {
		return c, err
	}
	c.Done, c.Result, c.Error, c.DoneAt = true, res.Result, res.Error, t.now
	return c, t.putAgentCommand(c)
}

// RecordAgentCommands keeps of agent's answered commands of attempt (the id attempt,
// and every id under it: attempt + ":" + sub) only what Recorded says, as the
// transaction in which their run recorded what it made of their answers (in step of
// workflow): the payload, Kept and the answer are dropped, their digests kept. The
// records stay done, so their ids never run again (an answer that comes after, from a
// twin or a resend, is dropped: CompleteAgentCommand), until ExpireAgentCommands
// forgets them. A command still pending, or recorded already, is left as it is. It
// returns how many it trimmed.
func (t *Tx) RecordAgentCommands(agent, attempt, workflow, step string) (int, error) {
	return t.changeAttemptCommands(agent, attempt, func(c AgentCommand) bool { return c.Done && c.Recorded == nil },
		func(c AgentCommand) AgentCommand { return recorded(c, workflow, step, t.now) })
}

// AttemptAnswered reports whether one of agent's commands of attempt (the id attempt,
// and every id under it: attempt + ":" + sub) holds an answer its run has not recorded
// yet (RecordAgentCommands): an attempt resumed after its timeout ran out reads it,
// rather than fail TIMEOUT over an answer the store recorded first.
func (t *Tx) AttemptAnswered(agent, attempt string) (bool, error) {
	answered := false
	err := t.eachAgentCommand(commandKey(agent, attempt), func(c AgentCommand) error {
		if c.Done && c.Recorded == nil && (c.ID == attempt || strings.HasPrefix(c.ID, attempt+":")) {
			answered = true
		}
		return nil
	})
	return answered, err
}

// changeAttemptCommands stores change(c) for each of agent's commands c of attempt (the
// id attempt, and every id under it: attempt + ":" + sub) that match holds for, and
// returns how many.
func (t *Tx) changeAttemptCommands(agent, attempt string, match func(AgentCommand) bool, change func(AgentCommand) AgentCommand) (int, error) {
	var changing []AgentCommand
	err := t.eachAgentCommand(commandKey(agent, attempt), func(c AgentCommand) error {
		if match(c) && (c.ID == attempt || strings.HasPrefix(c.ID, attempt+":")) {
			changing = append(changing, c)
		}
		return nil
	})
	for _, c := range changing {
		if err != nil {
			break
		}
		err = t.putAgentCommand(change(c))
	}
	return len(changing), err
}

// recorded is answered command c as it is kept once workflow recorded its answer at step.
func recorded(c AgentCommand, workflow, step string, at time.Time) AgentCommand {
	r := &CommandRecorded{Workflow: workflow, Step: step, At: at}
	if len(c.Payload) > 0 {
		sum := sha256.Sum256(c.Payload)
		r.PayloadSHA256 = sum[:]
	}
	answer := c.Result
	if c.Error != nil {
		r.ErrorCode = c.Error.Code
		answer, _ = proto.Marshal(c.Error)
	}
	sum := sha256.Sum256(answer)
	r.AnswerSHA256 = sum[:]
	return AgentCommand{Node: c.Node, Role: c.Role, ID: c.ID, Kind: c.Kind, Tenant: c.Tenant, CreatedAt: c.CreatedAt,
		Done: true, DoneAt: c.DoneAt, Recorded: r}
}

// AgentCommand returns one command, NOT_FOUND when it is not stored.
func (t *Tx) AgentCommand(node, id string) (AgentCommand, error) {
	var c AgentCommand
	ok, err := t.get(bucketAgentCommands, commandKey(node, id), &c)
	if err == nil && !ok {
		err = notFound("command of node "+node, id)
	}
	return c, err
}

// PendingAgentCommands lists node's commands that await an answer, oldest first.
func (t *Tx) PendingAgentCommands(node string) ([]AgentCommand, error) {
	var out []AgentCommand
	err := t.eachAgentCommand([]byte(node+"/"), func(c AgentCommand) error {
		if !c.Done {
			out = append(out, c)
		}
		return nil
	})
	slices.SortStableFunc(out, func(a, b AgentCommand) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, err
}

// WithdrawAgentCommands records agent's commands of attempt still pending (the id
// attempt, and every id under it: attempt + ":" + sub) answered with why, as a relay
// whose caller stops waiting withdraws its command (agents.Endpoint's withdraw): each is
// done, so that no agent that connects later gets it, and the commit tells whoever
// holds the agent's session, which withdraws it from an agent running it. It returns
// how many.
func (t *Tx) WithdrawAgentCommands(agent, attempt string, why *proto.Error) (int, error) {
	return t.changeAttemptCommands(agent, attempt, func(c AgentCommand) bool { return !c.Done }, func(c AgentCommand) AgentCommand {
		c.Done, c.DoneAt, c.Error = true, t.now, Withdrawn(c.ID, c.Kind, why)
		return c
	})
}

// Withdrawn is the answer recorded for command id of kind when it is withdrawn for why:
// why's code and reason, saying so.
func Withdrawn(id, kind string, why *proto.Error) *proto.Error {
	return proto.Errorf(why.Code, "command %s (%s) was withdrawn: %s", id, kind, why.Message).WithReason(why.Details.Reason)
}

// DropPendingAgentCommands forgets agent's commands not answered yet whose id starts
// with prefix (a workflow run's, "wf_...:"), and returns how many: the agent, when it
// connects later, never gets them. It reads only agent's commands under prefix, one
// range of the bucket's keys (agent/prefix...), however many the fleet holds.
func (t *Tx) DropPendingAgentCommands(agent, prefix string) (int, error) {
	return t.dropAgentCommands(commandKey(agent, prefix), func(c AgentCommand) bool { return !c.Done })
}

// dropAgentCommands forgets every command whose key starts with from (every one when it
// is empty) that drop holds for, and returns how many.
func (t *Tx) dropAgentCommands(from []byte, drop func(AgentCommand) bool) (int, error) {
	var doomed []AgentCommand
	err := t.eachAgentCommand(from, func(c AgentCommand) error {
		if drop(c) {
			doomed = append(doomed, c)
		}
		return nil
	})
	for _, c := range doomed {
		if err == nil {
			err = t.deleteAgentCommand(c)
		}
	}
	return len(doomed), err
}

func (t *Tx) eachAgentCommand(prefix []byte, fn func(AgentCommand) error) error {
	c := t.kv.cursor(bucketAgentCommands)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var cmd AgentCommand
		if err := decode(bucketAgentCommands, k, v, &cmd); err != nil {
			return err
		}
		if err := fn(cmd); err != nil {
			return err
		}
	}
	return nil
}
