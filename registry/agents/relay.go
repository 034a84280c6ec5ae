package agents

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/quic-go/quic-go"
)

// Relay sends a command to node's agent of role and waits for its answer: the result,
// or the agent's error as a *proto.Error. Only a session of that node and role gets it,
// never one of the node's other agent (a machine's ramdisk and its installed OS are two).
// The command is stored first, with its role, so it outlives a dropped link and a
// registry restart: it is sent whenever the agent is connected, and sent again when it
// reconnects, until answered. The answer stays stored with the command until
// CommandTTL: every Relay of the same id gets it from there, whenever it comes (a
// second caller, a caller that comes back, a registry resuming its step after a
// restart), and the command is never stored anew or sent again, so no agent runs it
// again, not even one whose process started after the answer and remembers none. Once
// the workflow run whose step relayed it recorded what it made of the answer
// (store.Tx.RecordAgentCommands), only the answer's digest is kept: a Relay of the id
// then is INVALID_STATE, naming the run and step (store.AgentCommand.Spent), and sends
// and runs nothing. An
// empty cmd.ID gets a fresh one. When ctx ends first, Relay returns TIMEOUT and
// the command stays pending for a later Relay of the same ID (until the command TTL),
// unless ctx ended with a *proto.Error as its cause (context.Cause): then the caller
// gives the command up for that reason (its step timed out, its workflow was cancelled),
// and Relay withdraws it and returns that error's code (withdraw). A ctx ended so before
// Relay is called withdraws the command stored under the id without sending it again, and
// stores none (givenUp). A command of a kind
// the role's agent does not run (proto.RelayRoles) is refused before anything is stored
// or sent (relayedTo).
func (e *Endpoint) Relay(ctx context.Context, node string, role proto.Role, cmd proto.Command) (json.RawMessage, error) {
	return e.RelayKept(ctx, node, role, cmd, nil)
}

// RelayKept is Relay of a command stored with kept, what its caller keeps beside it to
// read the answer by and no agent gets (store.AgentCommand.Kept): a pending command of
// the id stored with another payload or kept value is CONFLICT, since the agent may be
// running it already.
func (e *Endpoint) RelayKept(ctx context.Context, node string, role proto.Role, cmd proto.Command, kept json.RawMessage) (json.RawMessage, error) {
	if err := relayedTo(cmd.Kind, role); err != nil {
		return nil, err
	}
	if cmd.ID == "" {
		cmd.ID = newCommandID()
	}
	if why, ok := givenUp(ctx); ok {
		// Given up before it is relayed (a step resumed past its timeout): it is
		// withdrawn as it stands, neither stored anew nor sent again, so that no agent
		// starts what its caller no longer waits for.
		return e.withdraw(node, cmd, why)
	}
	cl, first := e.calls.join(node, cmd.ID)
	defer e.calls.leave(node, cmd.ID, cl)
	var (
		c       store.AgentCommand
		existed bool
	)
	err := e.cfg.Store.Update(func(tx *store.Tx) (err error) {
		_, err = tx.AgentCommand(node, cmd.ID)
		if existed = err == nil; !existed && proto.CodeOf(err) != proto.NotFound {
			return err
		}
		c, err = tx.EnqueueAgentCommand(node, role, cmd, kept)
		return err
	})
	if err != nil {
		return nil, err
	}
	switch {
	case c.Done:
		e.calls.complete(c)
	case first && existed:
		// A command enqueued now reaches the hook (commandChanged) of whichever
		// registry holds the agent's session; one enqueued before (by a registry that
		// drove the step before this one, or before a restart) is sent again here if
		// the session is here.
		e.sendCommand(c)
	}
	select {
	case <-cl.done:
		return answer(cl.cmd)
	case <-ctx.Done():
		if why, ok := givenUp(ctx); ok {
			return e.withdraw(node, cmd, why)
		}
		return nil, proto.Errorf(proto.Timeout, "command %s (%s) of node %s has no answer yet: %w", cmd.ID, cmd.Kind, node, ctx.Err())
	case <-e.ctx.Done():
		return nil, proto.Errorf(proto.InvalidState, "the agent endpoint is closed; command %s of node %s stays pending", cmd.ID, node)
	}
}

// givenUp reports whether ctx ended with a *proto.Error as its cause (context.Cause),
// which its caller gives its command up for, and returns that error.
func givenUp(ctx context.Context) (*proto.Error, bool) {
	if ctx.Err() == nil {
		return nil, false
	}
	return errors.AsType[*proto.Error](context.Cause(ctx))
}

// answer is the answer of answered command c, which stays stored for the later relays
// of its id until its run records it (store.AgentCommand.Spent: INVALID_STATE then, as
// the answer is no longer kept; a relay that came in before gets it, one that comes
// after is never resent).
func answer(c store.AgentCommand) (json.RawMessage, error) {
	if err := c.Spent(); err != nil {
		return nil, err
	}
	if c.Error != nil {
		return nil, c.Error
	}
	return c.Result, nil
}

// withdraw gives up cmd of node, which its caller no longer waits for (why): it records
// the command done with why's code and reason, as an answer is recorded, which later
// relays of its id get. The commit tells whoever holds the agent's session
// (commandChanged, here or at another replica): a command held back for its tenant's
// share is not sent, and one sent is withdrawn from the agent, which cancels it. An
// answer the agent had recorded first wins, and is returned; one that comes after is
// dropped (deliver).
func (e *Endpoint) withdraw(node string, cmd proto.Command, why *proto.Error) (json.RawMessage, error) {
	res := proto.Result{ID: cmd.ID, Error: store.Withdrawn(cmd.ID, cmd.Kind, why)}
	var c store.AgentCommand
	err := e.cfg.Store.Update(func(tx *store.Tx) (err error) { c, err = tx.CompleteAgentCommand(node, res); return err })
	switch {
	case proto.CodeOf(err) == proto.NotFound:
		return nil, res.Error // forgotten: past CommandTTL, or dropped with its cancelled run
	case err != nil:
		return nil, err
	}
	return answer(c)
}

// relayedTo refuses a command of kind to role unless role's agent runs kind
// (proto.RelayRoles): the installed OS's agent, whose machine's root user holds its key,
// never gets a ramdisk's disk.wipe or the deploy.image whose delivery carries the next
// installation's user data. It is FORBIDDEN (reason role), not INVALID_INPUT: the command
// is well formed and the rule is who may receive it, as for a signed result of a role
// that does not run its kind (attest). A kind no step names or relays passes: no agent of
// the project has a handler for it, and the agent answers UNSUPPORTED.
func relayedTo(kind string, role proto.Role) error {
	roles, known := proto.RelayRoles(kind)
	if !known || slices.Contains(roles, role) {
		return nil
	}
	if len(roles) == 0 {
		return proto.Errorf(proto.Forbidden, "no agent runs %s: the registry runs it itself, and relays it to no agent", kind).WithReason(proto.ReasonRole)
	}
	want := proto.RolesText(roles)
	return proto.Errorf(proto.Forbidden, "%s runs on a %s agent, never on a %s agent: relay it to the %s agent", kind, want, role, want).WithReason(proto.ReasonRole)
}

// deliver sends a command on a new stream of s and records the answer, unless one was
// recorded first (sent twice across a reconnect, or withdrawn). If the link drops
// first, the command stays pending and the agent's next hello sends it again; once ctx
// ends with errWithdrawn (the command was withdrawn) nothing is recorded. The
// commit of the answer wakes whoever waits for it, here or at another replica
// (commandChanged). A session whose certificate its node no longer passes, as the store
// reads now (store.Tx.CheckAgent), is ended instead: the agent of an earlier
// installation never gets a command of the next one, even one relayed before this
// registry hears of the installation's change (identityChanged).
func (e *Endpoint) deliver(ctx context.Context, s *session, c store.AgentCommand) {
	if e.letGo(s, e.current(s)) {
		return
	}
	res, err := e.exchange(ctx, s, c)
	if err != nil {
		e.log.Debug("relay", "node", s.node, "command", c.ID, "err", err)
		return
	}
	// The answer is taken only from a certificate that its node or site still passes as
	// the answer is recorded: one of an earlier epoch answers with the refusal, and its
	// session ends.
	var refused error
	err = e.cfg.Store.Update(func(tx *store.Tx) error {
		if refused = tx.CheckAgent(s.credential()); refused != nil {
			res = proto.Result{ID: res.ID, Error: proto.AsError(refused)}
		}
		_, err := tx.CompleteAgentCommand(s.node, res)
		return err
	})
	if refused != nil {
		e.letGo(s, refused)
	}
	switch {
	case proto.CodeOf(err) == proto.NotFound:
		// Forgotten meanwhile: past CommandTTL, or dropped with its cancelled run.
		e.log.Debug("answer dropped: the command was forgotten", "node", s.node, "command", c.ID)
	case err != nil:
		e.log.Error("record command result", "node", s.node, "command", c.ID, "err", err)
	}
}

// commandChanged is the store's hook for relayed commands, this registry's commits and
// (on etcd) the other replicas': an answered command wakes the Relay calls waiting for
// it here, and ends its delivery if one is still under way here (withdrawn: nobody waits
// for another answer); a pending one is sent if its agent's session is here.
func (e *Endpoint) commandChanged(c store.AgentCommand) {
	if c.Done {
		e.calls.complete(c)
		for _, s := range e.sessionsFor(c) {
			s.withdraw(sendKeyOf(c))
		}
		return
	}
	e.sendCommand(c)
}

// sendCommand delivers a pending command to its agent if the agent's session is here.
// A session registered after the command was stored sends it in its hello, so between
// the two every session of the node and role gets it.
func (e *Endpoint) sendCommand(c store.AgentCommand) {
	for _, s := range e.sessionsFor(c) {
		e.sendOn(s, c)
	}
}

// sessionsFor lists the sessions here of the agents command c is for.
func (e *Endpoint) sessionsFor(c store.AgentCommand) []*session {
	var out []*session
	for _, role := range proto.Roles {
		if s := e.session(c.Node, role); s != nil && c.For(role) {
			out = append(out, s)
		}
	}
	return out
}

// sendOn delivers a pending command on session s, unless it is on its way there already.
// Its delivery ends with the session's connection, or when the command is withdrawn
// (session.withdraw).
func (e *Endpoint) sendOn(s *session, c store.AgentCommand) {
	k := sendKeyOf(c)
	ctx, withdraw := context.WithCancelCause(s.conn.Context())
	if !s.startSending(k, withdraw) {
		withdraw(nil)
		return
	}
	e.spawn(func() {
		defer withdraw(nil)
		defer s.doneSending(k)
		e.deliver(ctx, s, c)
	})
}

// A command's progress reports are told (and recorded in its run, a write of the store
// every tenant shares) at most one every progressGap, each of at most
// proto.MaxProgressDetail bytes: an agent's (or whoever holds its key's) flood of
// reports costs the store no more than that. A ramdisk reports a deploy's progress
// every second. An agent's acks and inventory sections are spaced by the same gap
// (reportBurst).
const progressGap = 500 * time.Millisecond

// exchange sends c, completed by Expand, on a new stream and reads its answer. A
// command Expand refuses is answered with its error without being sent. A command of a
// tenant that holds its share of the session's streams waits for one of them first
// (shares), until its step's deadline (store.AgentCommand.Deadline): held back past it,
// it is answered TIMEOUT and never sent. A command sent carries the seconds left to its
// deadline, so that the agent ends it when its step would. A command whose message
// passes an agent frame is answered with that, unsent (tooLarge). Once ctx ends with
// errWithdrawn the command is not sent, or its stream is reset with codeWithdrawn, which
// tells the agent to cancel it.
func (e *Endpoint) exchange(ctx context.Context, s *session, c store.AgentCommand) (proto.Result, error) {
	cmd := c.Command()
	if e.cfg.Expand != nil {
		var err error
		if cmd, err = e.cfg.Expand(s.node, s.role, cmd); err != nil {
			return proto.Result{ID: c.ID, Error: proto.AsError(err)}, nil
		}
	}
	held := ctx
	deadline, timed := c.Deadline()
	if timed {
		var cancel context.CancelFunc
		held, cancel = context.WithTimeout(ctx, deadline.Sub(e.cfg.Now()))
		defer cancel()
	}
	if !s.shares.take(held.Done(), cmd.Tenant) {
		if ctx.Err() != nil {
			return proto.Result{}, context.Cause(ctx)
		}
		return proto.Result{ID: c.ID, Error: proto.Errorf(proto.Timeout, "%s waited for its tenant's share of the site's command slots past its step's timeout of %ds, and was not sent", c.Kind, c.TimeoutSeconds)}, nil
	}
	defer s.shares.give(cmd.Tenant)
	if timed {
		cmd.TimeoutSeconds = secondsLeft(deadline.Sub(e.cfg.Now()))
	}
	body, err := proto.Marshal(&proto.Message{Type: proto.MsgCommand, Command: &cmd})
	if err != nil {
		return proto.Result{}, err
	}
	if len(body) > proto.MaxFrame {
		return proto.Result{ID: c.ID, Error: e.tooLarge(s, c, len(body))}, nil
	}
	stream, err := s.conn.OpenStreamSync(ctx)
	if err != nil {
		return proto.Result{}, err
	}
	// Both directions end on every path, or the stream counts against the agent's
	// limit of open command streams for the life of the connection.
	answered := false
	defer func() {
		stream.CancelRead(0) // a no-op once the agent's close was read
		if !answered {
			stream.CancelWrite(quic.StreamErrorCode(codeProtocol))
		}
	}()
	stopWithdraw := context.AfterFunc(ctx, func() {
		if context.Cause(ctx) == errWithdrawn {
			stream.CancelWrite(quic.StreamErrorCode(codeWithdrawn))
			stream.CancelRead(quic.StreamErrorCode(codeWithdrawn))
		}
	})
	defer stopWithdraw()
	stream.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := proto.WriteFrame(stream, body); err != nil {
		return proto.Result{}, err
	}
	// The registry's end of the stream stays open until the result is read: its close
	// tells the agent that the result arrived (boot.kexec reboots only then).
	told := spacing{gap: progressGap, burst: 1}
	for {
		m, err := proto.ReadMessage(stream)
		if err != nil {
			return proto.Result{}, err
		}
		if m.Type == proto.MsgProgress && m.Progress.ID == c.ID {
			// At most one report every progressGap, of at most maxProgressDetail, is told
			// (the run records each); a report of a certificate no longer current is not
			// told, and ends the session.
			now := e.cfg.Now()
			if len(m.Progress.Detail) > proto.MaxProgressDetail || told.wait(now) > 0 {
				continue
			}
			told.take(now, 1)
			if e.cfg.OnProgress != nil && !e.letGo(s, e.current(s)) {
				e.cfg.OnProgress(s.node, c.ID, m.Progress.Detail)
			}
			continue
		}
		if m.Type != proto.MsgResult || m.Result.ID != c.ID {
			return proto.Result{}, proto.Errorf(proto.InvalidInput, "answer to command %s is a %s of %q", c.ID, m.Type, resultID(m))
		}
		stopWithdraw() // answered: the stream ends as an answered one does
		answered = true
		stream.Close()
		res := m.Result.Bounded(c.Kind)
		if e.cfg.Received != nil {
			var peer *x509.Certificate
			if certs := s.conn.ConnectionState().TLS.PeerCertificates; len(certs) > 0 {
				peer = certs[0]
			}
			res = e.cfg.Received(s.node, s.role, peer, cmd, c.CreatedAt, res)
		}
		return res, nil
	}
}

// tooLarge is the answer of command c, whose message to the agent of s takes size bytes
// as delivered (Expand's user data, extras and image sources in it), more than an agent
// frame carries: no session of the agent could ever be sent it, so it is answered with
// that, unsent, rather than left pending to fail on every session until its step times
// out. The registry bounds what each command carries well under the frame, so one this
// large is a bound missing, and logged as a warning.
func (e *Endpoint) tooLarge(s *session, c store.AgentCommand, size int) *proto.Error {
	e.log.Warn("command too large for an agent frame, answered unsent", "node", s.node, "role", s.role, "command", c.ID, "kind", c.Kind,
		"bytes", size, "max", proto.MaxFrame)
	return proto.Errorf(proto.InvalidInput, "command %s (%s) takes %d bytes as delivered, more than the %d bytes an agent frame carries (proto.MaxFrame): it was withdrawn unsent; make what it carries smaller (its user data, its extras)",
		c.ID, c.Kind, size, proto.MaxFrame).WithPath("payload").WithReason(proto.ReasonTooLarge)
}

// errWithdrawn is the cause a delivery's context ends with when its command was
// withdrawn (session.withdraw).
var errWithdrawn = errors.New("the command was withdrawn: nobody waits for its answer")

// secondsLeft is left in whole seconds, rounded up, at least 1: the timeout a command
// sent with left to its deadline carries (proto.Command.TimeoutSeconds, where 0 is none).
func secondsLeft(left time.Duration) int64 {
	return max(1, int64((left+time.Second-1)/time.Second))
}

func resultID(m proto.Message) string {
	if m.Result != nil {
		return m.Result.ID
	}
	return ""
}

// spawn runs fn on a goroutine the endpoint waits for at Close, and reports whether it
// did: after Close it does nothing.
func (e *Endpoint) spawn(fn func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx.Err() != nil {
		return false
	}
	e.wg.Go(fn)
	return true
}

func newCommandID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return "cmd-" + hex.EncodeToString(b)
}

// calls are the Relay calls waiting for answers, one per command however many callers
// wait for it.
type calls struct {
	mu sync.Mutex
	m  map[callKey]*call
}

type callKey struct{ node, id string }

type call struct {
	done    chan struct{}
	cmd     store.AgentCommand // the answered command, once done is closed
	waiters int
}

func (cs *calls) init() { cs.m = map[callKey]*call{} }

// join returns the call of a command, making it (first) when nobody waits for it yet.
func (cs *calls) join(node, id string) (cl *call, first bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	k := callKey{node, id}
	cl = cs.m[k]
	if cl == nil {
		cl = &call{done: make(chan struct{})}
		cs.m[k] = cl
		first = true
	}
	cl.waiters++
	return cl, first
}

// leave drops a caller; the last one to leave forgets the call.
func (cs *calls) leave(node, id string, cl *call) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cl.waiters--; cl.waiters == 0 && cs.m[callKey{node, id}] == cl {
		delete(cs.m, callKey{node, id})
	}
}

// complete hands an answered command to everyone waiting for it. An answer of the id is
// the answer for every call of it, however late its commit's hook comes (after the
// callers it was for had the answer from the store and left, and another joined): the
// store keeps it until CommandTTL and never stores the id anew meanwhile.
func (cs *calls) complete(c store.AgentCommand) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	k := callKey{c.Node, c.ID}
	if cl := cs.m[k]; cl != nil {
		delete(cs.m, k)
		cl.cmd = c
		close(cl.done)
	}
}
