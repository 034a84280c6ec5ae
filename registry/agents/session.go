package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/quic-go/quic-go"
)

// session is one connected agent: its connection and the session stream it opened.
type session struct {
	identity
	// epoch is the identity epoch its certificate names (proto.IdentityEpoch).
	epoch int64
	// run is the workflow run its certificate names (proto.AgentRun): for a ramdisk, the
	// run that minted the token it joined with.
	run string
	// tenant is the tenant of the machine whose agent this is ("" for a site agent):
	// its pushes hold at most their share of the window.
	tenant string
	conn   *quic.Conn
	stream *quic.Stream
	// opened is when the agent's hello was read, on the endpoint's clock (Config.Now), as
	// its end is: the store records both, and every other time, by the registry's clock.
	opened time.Time
	// readsShutdown is set when the agent's hello said it reads a shutdown message
	// (proto.Hello.ReadsShutdown): a stopping endpoint tells it on the session stream
	// first (tellShutdown).
	readsShutdown bool

	// wmu serialises writes on the session stream and guards sent, pending and ended.
	wmu sync.Mutex
	// sent is the generation the agent has, as far as the endpoint knows: the one its
	// hello reported, then each one pushed.
	sent int64
	// pending is the push written and not yet acknowledged, holding a place in the
	// endpoint's window; ended is set once the session ended (nothing more is pushed).
	pending *pendingPush
	ended   bool

	// cmu guards sending: the commands on their way to the agent on this session, each
	// sent once however many registries' commits tell of it, with what withdraws each.
	cmu     sync.Mutex
	sending map[sendKey]context.CancelCauseFunc

	// shares are the tenants' shares of the agent's command streams.
	shares shares

	// reports are the acks and inventory sections that wait for the session's spacing.
	reports reports

	// probing is set while the endpoint probes the session's path (remeasure);
	// probedLeft is the probe timeout, in nanoseconds, its last probes left it at while
	// still stale, 0 for none (probeAgain).
	probing    atomic.Bool
	probedLeft atomic.Int64
}

// sendKey is a command as it is on its way: its id, and when it was stored. An id asked
// for again after the store forgot it (CommandTTL) is stored anew, and is sent anew even
// while the delivery of the earlier one is still ending: that one records nothing for
// it once it has recorded its own answer.
type sendKey struct {
	id     string
	stored int64
}

func sendKeyOf(c store.AgentCommand) sendKey { return sendKey{c.ID, c.CreatedAt.UnixNano()} }

// startSending reports whether command k is to be sent now (it is not on its way on this
// session already) and marks it on its way, withdraw ending its delivery (withdraw).
func (s *session) startSending(k sendKey, withdraw context.CancelCauseFunc) bool {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.sending[k] != nil {
		return false
	}
	if s.sending == nil {
		s.sending = map[sendKey]context.CancelCauseFunc{}
	}
	s.sending[k] = withdraw
	return true
}

// doneSending marks command k no longer on its way.
func (s *session) doneSending(k sendKey) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	delete(s.sending, k)
}

// credential is what the agent's certificate names, which every check of it passes
// (store.Tx.CheckAgent).
func (s *session) credential() proto.AgentCredential {
	return proto.AgentCredential{Node: s.node, Role: s.role, Epoch: s.epoch, Run: s.run}
}

// withdraw ends the delivery of command k on this session, if it is on its way, with
// errWithdrawn: held back for its tenant's share it is not sent; sent, its stream is
// reset with the code that tells the agent to cancel it.
func (s *session) withdraw(k sendKey) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if cancel := s.sending[k]; cancel != nil {
		cancel(errWithdrawn)
	}
}

// serve starts one agent connection: it waits for the hello, refuses a node whose
// identity is revoked or a certificate of an earlier installation, registers the
// session (replacing an older one of the same node and role), brings the agent up to
// date, and leaves the session to await.
func (e *Endpoint) serve(conn *quic.Conn) {
	cert, err := identify(conn.ConnectionState().TLS)
	if err != nil {
		conn.CloseWithError(codeProtocol, err.Error())
		return
	}
	id := identity{cert.Node, cert.Role}
	helloRead := e.awaitingHello(id, conn)
	defer helloRead()
	ctx, cancel := context.WithTimeout(e.ctx, helloTimeout)
	stream, err := conn.AcceptStream(ctx)
	cancel()
	if err != nil && e.ctx.Err() != nil {
		e.comeBackLater(conn)
		return
	}
	if err != nil {
		conn.CloseWithError(codeProtocol, "no session stream")
		return
	}
	stream.SetReadDeadline(time.Now().Add(helloTimeout))
	stop := context.AfterFunc(e.ctx, func() { stream.SetReadDeadline(time.Now()) }) // Close waits for this
	m, err := proto.ReadMessage(stream)
	stop()
	helloRead() // read or not: a newer connection of the agent no longer closes this one
	if err != nil && e.ctx.Err() != nil {
		e.comeBackLater(conn)
		return
	}
	if err == nil && m.Type != proto.MsgHello {
		err = proto.Errorf(proto.InvalidInput, "the first message of a session is a hello, not %q", m.Type)
	}
	if err == nil {
		e.adm.helloRead(m.Hello)
	} else {
		e.adm.helloRead(nil)
	}
	if err != nil {
		// A hello refused for one of its fields came from a holder of the agent's
		// certificate, and no agent of this version sends one: a warning, for an
		// operator to look at that machine. Anything else (no hello within the wait, a
		// connection that broke) is told at debug.
		level := slog.LevelDebug
		if malformedHello(err) != nil {
			level = slog.LevelWarn
		}
		e.log.Log(e.ctx, level, "agent session refused", "node", id.node, "remote", conn.RemoteAddr().String(), "err", err)
		conn.CloseWithError(codeProtocol, helloRefused(err))
		return
	}
	stream.SetReadDeadline(time.Time{})
	var tenant string
	err = e.cfg.Store.View(func(tx *store.Tx) (err error) {
		tenant, err = tx.CheckAgentOf(cert)
		return err
	})
	if proto.CodeOf(err) == proto.Forbidden {
		e.log.Warn("agent session refused", "node", id.node, "err", err)
		conn.CloseWithError(codeRevoked, err.Error())
		return
	}
	if err != nil {
		e.log.Error("agent identity", "node", id.node, "err", err)
		conn.CloseWithError(codeShutdown, "registry failed to read the node")
		return
	}
	s := &session{identity: id, epoch: cert.Epoch, run: cert.Run, tenant: tenant, conn: conn, stream: stream, sent: m.Hello.ObservedGeneration, opened: e.cfg.Now(),
		readsShutdown: m.Hello.ReadsShutdown, reports: reports{pace: e.paceOf(id)}}
	if !e.register(s) {
		return
	}
	e.log.Debug("agent session", "node", id.node, "role", id.role, "observedGeneration", m.Hello.ObservedGeneration)
	err = e.hello(s, m.Hello)
	if proto.CodeOf(err) == proto.Forbidden {
		e.log.Warn("agent session refused", "node", id.node, "err", err)
		e.end(s, codeRevoked, err.Error())
		return
	}
	if err != nil {
		e.log.Error("agent hello", "node", id.node, "err", err)
		e.end(s, codeShutdown, "registry failed to record the hello")
		return
	}
	if !e.opened(s, m.Hello.BootID) {
		return
	}
	e.wg.Go(func() { s.await(e) })
}

// awaitingHello marks conn as the connection of agent id whose hello the endpoint
// awaits, until done: each such connection may hold a partial hello of up to an agent
// frame (4 MiB) for helloTimeout, and whoever holds the agent's key could open
// connections one after the other, as fast as the handshakes go, each sending a frame
// one byte short. So an agent has one connection in hello at a time: a newer one closes
// the one before it with CloseReplaced, as a newer session replaces an older one
// (register), and an agent that came back dialed anew and gave the older one up.
func (e *Endpoint) awaitingHello(id identity, conn *quic.Conn) (done func()) {
	e.mu.Lock()
	old := e.hellos[id]
	e.hellos[id] = conn
	e.mu.Unlock()
	if old != nil {
		e.log.Debug("agent connection replaced before its hello", "node", id.node, "role", id.role, "remote", old.RemoteAddr().String())
		old.CloseWithError(codeReplaced, "replaced by a newer connection of the same node and role before its hello")
	}
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.hellos[id] == conn {
			delete(e.hellos, id)
		}
	}
}

// helloRefused is the close reason of a session whose first message, read until err,
// is no hello the endpoint takes: a malformed field of one is named with its path, as
// the message's check reports it (`expected a hello: INVALID_INPUT: boot id ... (at
// hello.bootId)`), so that whoever reads the agent's log sees what to fix; anything else
// (no message, another type, a frame that does not decode) is "expected a hello".
func helloRefused(err error) string {
	if e := malformedHello(err); e != nil {
		return "expected a hello: " + e.Error()
	}
	return "expected a hello"
}

// malformedHello is err when it refuses a field of a hello (its path in hello.), nil
// otherwise.
func malformedHello(err error) *proto.Error {
	if e, ok := errors.AsType[*proto.Error](err); ok && strings.HasPrefix(e.Details.Path, "hello.") {
		return e
	}
	return nil
}

// await waits for the agent's next frame on a goroutine of its own. The goroutine is
// new and waits right in its first call, so its stack stays at the runtime's smallest
// for the long idle stretches of a session. A ping, the frame an idle agent sends every
// keep-alive period, it takes as the bytes proto.PingFrame and waits again on the same
// goroutine: nothing in that grows its stack, which decoding would (the runtime would
// copy the stack at every ping). Any other frame it hands to received on the same
// goroutine, which starts the next await.
func (s *session) await(e *Endpoint) {
	var head [len(proto.PingFrame)]byte
	for {
		n, err := io.ReadFull(s.stream, head[:4])
		if err == nil && string(head[:4]) == proto.PingFrame[:4] {
			var m int
			m, err = io.ReadFull(s.stream, head[4:])
			n += m
		}
		if err == nil && string(head[:n]) == proto.PingFrame {
			e.remeasure(s) // the agent's keep-alive: nothing more to do, unless its path's estimate is stale
			continue
		}
		e.received(s, head[:n], err)
		return
	}
}

// received reads the rest of the frame await began (head, its first bytes, read until
// err), handles its message and waits for the next one. When the stream fails or the
// agent breaks the protocol, the session ends.
func (e *Endpoint) received(s *session, head []byte, err error) {
	if len(head) == 0 && err != nil {
		e.end(s, codeProtocol, "session stream ended")
		return
	}
	m, err := proto.ReadMessage(io.MultiReader(bytes.NewReader(head), s.stream))
	switch {
	case err != nil:
		e.log.Debug("agent session ends", "node", s.node, "err", err)
		e.end(s, codeProtocol, "session stream failed")
		return
	case m.Type == proto.MsgAck && !s.role.TakesNodeSpecs():
		// Only an agent pushed NodeSpecs acknowledges one: a ramdisk's ack would record the
		// installed host's generation as applied (a workflow waiting for it would go on).
		e.log.Warn("agent acknowledged a NodeSpec its role is never pushed", "node", s.node, "role", s.role)
		e.end(s, codeProtocol, "unexpected message "+string(m.Type))
		return
	case m.Type == proto.MsgAck:
		err = e.ack(s, m.Ack)
	case m.Type == proto.MsgInventory:
		err = e.inventory(s, m.Inventory)
	case m.Type == proto.MsgSecretRequest:
		err = e.secret(s, m.SecretRequest)
	case m.Type == proto.MsgRenewRequest:
		err = e.renew(s, m.RenewRequest)
	case m.Type == proto.MsgPing: // a keep-alive written otherwise than proto.PingFrame
		e.remeasure(s)
	default:
		e.log.Debug("agent sent an unexpected message", "node", s.node, "type", m.Type)
		e.end(s, codeProtocol, "unexpected message "+string(m.Type))
		return
	}
	if proto.CodeOf(err) == proto.Forbidden || s.over() {
		return // a certificate no longer current, or what the agent said not recorded: take ended the session and logged why
	}
	if err != nil {
		e.log.Error("agent message", "node", s.node, "type", m.Type, "err", err)
	}
	e.wg.Go(func() { s.await(e) })
}

// over reports whether the session ended (end).
func (s *session) over() bool {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.ended
}

// end closes the session's connection (a no-op when it is closed already) and forgets
// the session.
func (e *Endpoint) end(s *session, code quic.ApplicationErrorCode, why string) {
	s.conn.CloseWithError(code, why)
	e.unregister(s)
	s.wmu.Lock()
	s.ended = true
	e.endPendingLocked(s, pushEnded)
	s.wmu.Unlock()
}

// register makes s the session of its node and role, closing an older one of both (a
// session of the node's other agent stays). Once the endpoint is closing it registers
// nothing, tells the agent to come back later, and reports false.
func (e *Endpoint) register(s *session) bool {
	e.mu.Lock()
	if e.ctx.Err() != nil {
		e.mu.Unlock()
		e.comeBackLater(s.conn)
		return false
	}
	old := e.sessions[s.identity]
	// A session its agent closed already is not replaced (its end is on its way).
	warn := old != nil && e.replacing(s.identity, old.conn.Context().Err() == nil, time.Now())
	e.sessions[s.identity] = s
	e.mu.Unlock()
	if warn {
		e.warnTurns(s, old.conn.RemoteAddr().String())
	}
	if old != nil {
		old.conn.CloseWithError(codeReplaced, "replaced by a newer session of the same node and role")
	}
	return true
}

// replacedElsewhere counts the session of s's agent that another registry replica holds,
// which s replaces, as register counts one replaced here: that replica ends it once it
// hears of s (sessionOpened).
func (e *Endpoint) replacedElsewhere(s *session, replica string) {
	e.mu.Lock()
	warn := e.replacing(s.identity, true, time.Now())
	e.mu.Unlock()
	if warn {
		e.warnTurns(s, "a session at registry replica "+replica)
	}
}

// sessionOpened is the store's hook for agent sessions recorded as opened, this
// registry's and (on etcd) the other replicas': a session of an agent that another
// registry recorded replaces the session of the same agent here, as a newer session here
// would (CloseReplaced; the registry that opened it counted it: replacedElsewhere),
// once the store says that the other registry holds the agent's session (Elsewhere): a
// session here recorded since is the newer one, and the other registry hears of it.
func (e *Endpoint) sessionOpened(node, role string, holder store.Holder) {
	s := e.session(node, proto.Role(role))
	if s == nil || holder.Is(e.cfg.Holder) {
		return
	}
	e.spawn(func() {
		var replica string
		err := e.cfg.Store.View(func(tx *store.Tx) (err error) { replica, err = e.cfg.Elsewhere(tx, node, s.role); return err })
		if err != nil {
			e.log.Error("reading which registry holds an agent's session", "node", node, "role", role, "err", err)
			return
		}
		if replica == "" {
			return
		}
		e.mu.Lock()
		if e.sessions[s.identity] == s {
			delete(e.sessions, s.identity)
		}
		e.mu.Unlock()
		e.log.Debug("agent session replaced at another replica", "node", node, "role", role, "replica", replica)
		s.conn.CloseWithError(codeReplaced, "replaced by a newer session of the same node and role at registry replica "+replica)
	})
}

// Two agents of one node and role take turns: the one replaced waits its longest backoff
// (30 s by default) and replaces the other. A session replaced within twinWindow of the
// last replacement of its node and role is one more turn; the registry warns of an
// agent's turns at most once every twinWindow.
const twinWindow = 10 * time.Minute

// turn is when a session of an agent (node and role) last replaced a connected one, and
// when the registry last warned of that agent's turns.
type turn struct{ replaced, warned time.Time }

// replacing counts the session of agent id replaced at now by a newer one, if it was
// still connected (live), and reports whether to warn: its session was replaced within
// twinWindow before already, and the registry has not warned of its turns within
// twinWindow. e.mu is held.
func (e *Endpoint) replacing(id identity, live bool, now time.Time) (warn bool) {
	if !live {
		return false
	}
	t := e.turns[id]
	again := !t.replaced.IsZero() && now.Sub(t.replaced) <= twinWindow
	if again {
		e.replaced.again.Add(1)
		if warn = t.warned.IsZero() || now.Sub(t.warned) >= twinWindow; warn {
			t.warned = now
		}
	} else {
		e.replaced.first.Add(1)
	}
	t.replaced = now
	if e.turns == nil {
		e.turns = map[identity]turn{}
	}
	e.turns[id] = t
	if len(e.turns) >= e.turnsPrune || now.Sub(e.turnsPruned) > twinWindow {
		// Forget the nodes whose window passed, once the map has doubled since the last
		// time (a fleet-wide restart adds thousands at once, at a constant cost each,
		// amortized) or a window has passed.
		for id, t := range e.turns {
			if now.Sub(t.replaced) > twinWindow && now.Sub(t.warned) > twinWindow {
				delete(e.turns, id)
			}
		}
		e.turnsPrune, e.turnsPruned = max(minTurnsPrune, 2*len(e.turns)), now
	}
	return warn
}

// minTurnsPrune is the least size of the turns map at which it is pruned.
const minTurnsPrune = 64

// warnTurns tells the operator that two agents hold the certificate of s's node: s
// replaced the session replaced names (its agent's address, or the replica holding it),
// and a session of the node replaced another shortly before.
func (e *Endpoint) warnTurns(s *session, replaced string) {
	next := "stop the bcd of the two that should not run; if the certificate may have been stolen, " +
		"better-compute nodes retire " + s.node + " revokes the node's identity (metal.revokeIdentity), which ends both " +
		"sessions, and retires the machine for good (erased, powered off)"
	if s.role == proto.RoleSite {
		next = "stop the bcd site of the two that should not run"
	}
	e.log.Warn("two agents hold the certificate of one node and replace each other's session in turn",
		"node", s.node, "role", s.role, "remote", s.conn.RemoteAddr().String(), "replaced", replaced,
		"next", next)
}

// comeBackLater closes the connection of an agent whose session was still being set up
// when Close began (closeSessions did not know it), telling it to come back after the
// rest of the fleet.
func (e *Endpoint) comeBackLater(conn *quic.Conn) {
	e.mu.Lock()
	closing := e.closing
	e.mu.Unlock()
	conn.CloseWithError(codeShutdown, closing.reason(closing.n))
}

// unregister forgets s, unless a newer session replaced it already, and tells
// OnSessionEnd that it ended unless the endpoint is closing.
func (e *Endpoint) unregister(s *session) {
	e.mu.Lock()
	ended := e.sessions[s.identity] == s && e.ctx.Err() == nil
	if e.sessions[s.identity] == s {
		delete(e.sessions, s.identity)
	}
	e.keepPace(s, time.Now())
	e.mu.Unlock()
	if ended && e.cfg.OnSessionEnd != nil {
		e.cfg.OnSessionEnd(s.node, s.role, s.opened, e.cfg.Now())
	}
}

// hello records what the agent reported, pushes its NodeSpec if the agent's generation
// differs, and resends the commands for its role that await its answer. The NodeSpec
// and the generation applied are those of the agent of the spec's role: a machine's
// ramdisk, whose node has a spec for its installed OS, neither gets it nor records a
// generation. A reconnect that reports what the store holds costs reads only; what a
// hello writes counts against its agent's spacing, which the agent's sessions share, and
// waits for it as reports do (helloHeld), recorded at once when it lets them through
// (recordHello): a hello at every reconnect costs no more than reports. It checks
// the agent's certificate again first (FORBIDDEN when the node's identity is revoked or
// the certificate belongs to an earlier installation): one revoked or voided after serve
// checked it and before the session was registered found no session to end
// (Endpoint.identityChanged), and is refused here. What the hello writes (the generation
// applied, inventory sections) is checked again in its own transaction (written): an
// epoch moved between the reads and the write stores none of it. A session of the agent
// that another registry replica holds (Config.Elsewhere) is counted as replaced.
func (e *Endpoint) hello(s *session, h *proto.Hello) error {
	var (
		spec          proto.NodeSpec
		haveSpec      bool
		observedMoved bool
		changed       []string
		storedSite    proto.SiteInventory
		pending       []store.AgentCommand
		elsewhere     string
	)
	err := e.cfg.Store.View(func(tx *store.Tx) error {
		if err := tx.CheckAgent(s.credential()); err != nil {
			return err
		}
		var err error
		if e.cfg.Elsewhere != nil {
			if elsewhere, err = e.cfg.Elsewhere(tx, s.node, s.role); err != nil {
				return err
			}
		}
		spec, err = tx.NodeSpec(s.node)
		if haveSpec = err == nil; !haveSpec && proto.CodeOf(err) != proto.NotFound {
			return err
		}
		if haveSpec && spec.Role != s.role {
			haveSpec = false
		} else if s.role.TakesNodeSpecs() { // a ramdisk's hello reports no generation that counts
			st, err := tx.AgentStatus(s.node)
			if err != nil && proto.CodeOf(err) != proto.NotFound {
				return err
			}
			observedMoved = st.ObservedGeneration != h.ObservedGeneration
		}
		if changed, err = changedSections(tx, s, e.reported(s, h.Inventory)); err != nil {
			return err
		}
		if slices.Contains(changed, proto.SectionSite) {
			if storedSite, err = tx.SiteInventory(s.node); err != nil {
				return err
			}
		}
		pending, err = tx.PendingAgentCommands(s.node)
		return err
	})
	if err != nil {
		return err
	}
	if elsewhere != "" {
		e.replacedElsewhere(s, elsewhere)
	}
	if !e.helloHeld(s, h, changed, observedMoved) {
		if err := e.recordHello(s, h, changed, storedSite, observedMoved); err != nil {
			return err
		}
	}
	if haveSpec {
		s.wmu.Lock()
		if spec.Generation < h.ObservedGeneration && s.sent == h.ObservedGeneration {
			// The agent is ahead of the store (a store restored from a backup): the
			// store is the truth, send it. A newer spec pushed since the hello was read
			// (s.sent moved) is not: the spec read here is older than it.
			s.sent = 0
		}
		s.wmu.Unlock()
		e.send(s, spec, nil)
	}
	// On this session, not on the node's session now: another agent's session may have
	// replaced this one since the pending commands were read (its own hello reads them
	// again), and one of them may have been answered and forgotten since.
	for _, c := range pending {
		if c.For(s.role) {
			e.sendOn(s, c)
		}
	}
	return nil
}

// recordHello records the writes of hello h at once: the sections changed (of which
// the stored `site` section storedSite says how cut each is) and the generation applied
// when it moved. Those up to helloAlone and the `site` section go in one transaction
// with the generation, each larger one in a transaction of its own (splitSections).
func (e *Endpoint) recordHello(s *session, h *proto.Hello, changed []string, storedSite proto.SiteInventory, observedMoved bool) error {
	before, small, after := splitSections(changed, h.Inventory, storedSite)
	// Each in a transaction of its own, before the `site` section that counts it as
	// less cut than the stored one does: until that commits, the stored `site` section
	// still counts the new copy as cut, as it did the old one.
	if err := e.putAlone(s, before, h.Inventory); err != nil {
		return err
	}
	if observedMoved || len(small) > 0 {
		_, err := e.written(s, func(tx *store.Tx) error {
			if observedMoved {
				if err := tx.RecordObservedGeneration(s.node, h.ObservedGeneration); err != nil {
					return err
				}
			}
			for _, section := range small {
				if _, err := put(tx, s, section, h.Inventory[section]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if observedMoved {
			e.observed(s.node, h.ObservedGeneration)
		}
		for _, section := range small {
			e.inventoryChanged(s.node, section, h.Inventory[section])
		}
	}
	// Each in a transaction of its own, after the `site` section that counts what the
	// cut ones leave out.
	return e.putAlone(s, after, h.Inventory)
}

// opened tells OnSession that the session s, whose hello is recorded, opened from the
// machine's boot bootID, and reports whether the session goes on. When the store failed
// to record it (a join: a workflow waiting for the machine's return would wait on while
// the agent is connected; a site agent's session: the sites' view and the waits for the
// site agent would not see it), the session ends as for a message of the agent's that
// was not recorded (take, lost): its next hello, which tells the same boot, is recorded
// then. A session the store refuses as INVALID_INPUT is logged and goes on.
func (e *Endpoint) opened(s *session, bootID string) bool {
	if e.cfg.OnSession == nil {
		return true
	}
	err := e.cfg.OnSession(s.node, s.role, s.opened, bootID)
	if proto.CodeOf(err) == proto.InvalidInput {
		e.log.Error("agent session not recorded", "node", s.node, "role", s.role, "err", err)
	}
	return e.lost(s, "session", err)
}

// reported is inv without the sections the agent's role does not report
// (proto.CheckInventorySection), warned of with the first of them, once a
// minute for the agent's hellos (warnRefused): the hello goes on without them.
func (e *Endpoint) reported(s *session, inv map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(inv))
	var refused []error
	for section, data := range inv {
		if err := proto.CheckInventorySection(s.role, section, "hello.inventory"); err != nil {
			refused = append(refused, err)
			continue
		}
		out[section] = data
	}
	if len(refused) > 0 {
		e.warnRefused(s, "hello.inventory", "agent hello: inventory sections not kept", refused[0], "sections", len(refused))
	}
	return out
}

// helloAlone is the size from which a section of a hello is recorded in a transaction
// of its own, before or after the one that records the generation and the smaller
// sections (splitSections): a site agent's sections at their budgets add up to more
// than one etcd transaction takes (docs/store.md#limits).
const helloAlone = 64 << 10

// splitSections parts the changed sections of a hello (inv) into those recorded with
// its generation (small: the `site` section always) and the larger ones recorded each
// alone, in name order: before the `site` section those it counts as less cut than the
// stored one (storedSite) does, after it the others. So the stored `site` section never
// says a section is whole, or less cut, while the copy stored beside it is cut more:
// the registry keeps the image locations a cut `images` section leaves out by it.
func splitSections(changed []string, inv map[string]json.RawMessage, storedSite proto.SiteInventory) (before, small, after []string) {
	slices.Sort(changed)
	site := storedSite // unless the hello changes it
	if slices.Contains(changed, proto.SectionSite) {
		site = saidSite(inv, storedSite)
	}
	for _, section := range changed {
		switch {
		case section == proto.SectionSite || len(inv[section]) <= helloAlone:
			small = append(small, section)
		case site.Omitted[section] < storedSite.Omitted[section]:
			before = append(before, section)
		default:
			after = append(after, section)
		}
	}
	return before, small, after
}

// saidSite is the `site` section of inv, or storedSite when inv has none. One that does
// not decode is read as saying every section whole, as store.Tx.SiteInventory reads it.
func saidSite(inv map[string]json.RawMessage, storedSite proto.SiteInventory) proto.SiteInventory {
	data, ok := inv[proto.SectionSite]
	if !ok {
		return storedSite
	}
	var said proto.SiteInventory
	if json.Unmarshal(data, &said) != nil {
		said = proto.SiteInventory{}
	}
	return said
}

// putAlone stores each of the sections of inv, in a transaction of its own
// (putSection); one refused for its size is logged and marked, and the hello goes on.
func (e *Endpoint) putAlone(s *session, sections []string, inv map[string]json.RawMessage) error {
	write := func(w func(*store.Tx) error) error { _, err := e.written(s, w); return err }
	for _, section := range sections {
		if err := e.putSection(s, section, inv[section], write); err != nil && proto.CodeOf(err) != proto.InvalidInput {
			return err
		}
	}
	return nil
}

// changedSections lists the sections of inv, which the agent of s reported, that differ
// as stored (storedAs) from the stored ones, or whose last report was refused (so the
// copy stored, reported again, loses its mark).
func changedSections(tx *store.Tx, s *session, inv map[string]json.RawMessage) ([]string, error) {
	if len(inv) == 0 {
		return nil, nil
	}
	stored, err := tx.Inventory(s.node)
	if err != nil {
		return nil, err
	}
	have := make(map[string][]byte, len(stored))
	for _, sec := range stored {
		if sec.Refused == nil {
			have[sec.Section] = sec.Data
		}
	}
	var changed []string
	for section, data := range inv {
		if data, err = storedAs(tx, s, section, data); err != nil {
			return nil, err
		}
		var c bytes.Buffer
		if json.Compact(&c, data) != nil || !bytes.Equal(c.Bytes(), have[section]) {
			changed = append(changed, section)
		}
	}
	return changed, nil
}

// ack records the outcome of the agent's apply (take), at once or, when the session's
// spacing holds it, once it lets it through (reports): the push it answers gives its
// place in the window back at once either way.
func (e *Endpoint) ack(s *session, a *proto.Ack) error {
	e.acknowledged(s, a.Generation)
	if a.Error != nil {
		e.ackFailures.Add(1)
	} else {
		e.acks.Add(1)
	}
	if e.holdReport(s, a, nil) {
		return nil
	}
	return e.recordAck(s, a)
}

// recordAck stores the ack a (take). An apply's error is cut to proto.MaxErrorMessage
// (proto.Error.Cut) before it is logged or stored, as an answer to a command is
// (bounded): the agent's (or whoever holds its key's) frame may carry one of megabytes,
// which the node's agent status would keep.
func (e *Endpoint) recordAck(s *session, a *proto.Ack) error {
	if a.Error != nil {
		applyErr := a.Error.Cut(proto.MaxErrorMessage)
		e.log.Warn("agent failed to apply its NodeSpec", "node", s.node, "generation", a.Generation, "err", applyErr)
		return e.take(s, "apply failure", func(tx *store.Tx) error { return tx.RecordApplyFailure(s.node, a.Generation, applyErr) })
	}
	err := e.take(s, "acknowledgement", func(tx *store.Tx) error { return tx.RecordObservedGeneration(s.node, a.Generation) })
	if err == nil {
		e.observed(s.node, a.Generation)
	}
	return err
}

// inventory stores one section the agent sent (take), at once or, when the session's
// spacing holds it, once it lets it through (reports). A section the agent's role does
// not report is stored nowhere and warned of once a minute (warnRefused), and
// the session goes on.
func (e *Endpoint) inventory(s *session, inv *proto.Inventory) error {
	if err := proto.CheckInventorySection(s.role, inv.Section, "inventory.section"); err != nil {
		e.warnRefused(s, "inventory.section", "agent inventory section refused: its role does not report it", err)
		return nil
	}
	if e.holdReport(s, nil, inv) {
		return nil
	}
	return e.putReported(s, inv.Section, inv.Data)
}

// putReported stores a section the agent sent in an inventory message (take).
func (e *Endpoint) putReported(s *session, section string, data json.RawMessage) error {
	return e.putSection(s, section, data, func(w func(*store.Tx) error) error { return e.take(s, "inventory section", w) })
}

// putSection stores one section the agent sent, in a transaction of its own (write:
// take, or the hello's written). One the store refuses for its size (INVALID_INPUT at
// inventory.<section>) leaves the copy stored before, marked as refused
// (store.Tx.RefuseInventory) so that an operator sees it, and is logged; the session
// goes on.
func (e *Endpoint) putSection(s *session, section string, data json.RawMessage, write func(func(*store.Tx) error) error) error {
	var changed bool
	err := write(func(tx *store.Tx) (err error) {
		changed, err = put(tx, s, section, data)
		return err
	})
	if err == nil && changed {
		e.inventoryChanged(s.node, section, data)
	}
	if proto.CodeOf(err) == proto.InvalidInput && proto.AsError(err).Details.Path == "inventory."+section {
		e.log.Warn("agent inventory section refused: the copy stored before stays", "node", s.node, "role", s.role, "section", section, "bytes", len(data), "err", err)
		if _, merr := e.written(s, func(tx *store.Tx) error { return tx.RefuseInventory(s.node, section, len(data)) }); merr != nil {
			e.log.Warn("agent inventory section: its refusal not recorded", "node", s.node, "section", section, "err", merr)
		}
	}
	return err
}

func (e *Endpoint) inventoryChanged(node, section string, data json.RawMessage) {
	if e.cfg.OnInventory != nil {
		e.cfg.OnInventory(node, section, data)
	}
}

// take stores what the agent of session s said on it (what: an acknowledgement, an
// inventory section), write, in one transaction with the check of its certificate
// (store.Tx.CheckAgent): from the commit that moved its node's or site's identity epoch
// on, nothing a session of an earlier epoch says is stored, even on a registry that has
// not heard of that commit yet (identityChanged). A refusal (FORBIDDEN, reason revoked or
// earlier-installation) stores nothing and ends the session (letGo). So does a write
// that fails (the store unavailable; not a message the store refuses as INVALID_INPUT,
// which is logged), with CloseShutdown: the agent says nothing again on
// this session, and its next session's hello reports what was lost (the generation it
// applied, every inventory section) and is recorded in a transaction with the same check;
// a generation older than its NodeSpec's is pushed again, so an apply failure not
// recorded is told again once the agent applied it again.
func (e *Endpoint) take(s *session, what string, write func(tx *store.Tx) error) error {
	refused, err := e.written(s, write)
	if refused != nil {
		e.letGo(s, refused)
	} else {
		e.lost(s, what, err)
	}
	return err
}

// lost ends session s with CloseShutdown when the store failed to record what it said
// (what: a message of the agent's, or the session itself), err, and reports whether the
// session goes on: the agent says nothing again on it, and its next session's hello
// tells the registry again. An INVALID_INPUT is what is wrong with the message itself,
// which the agent would only say again: the session goes on.
func (e *Endpoint) lost(s *session, what string, err error) bool {
	if err == nil || proto.CodeOf(err) == proto.InvalidInput {
		return true
	}
	e.log.Error("agent "+what+" not recorded: its session ends, and the agent's next hello tells it again",
		"node", s.node, "role", s.role, "err", err)
	e.end(s, codeShutdown, "registry failed to record the "+what)
	return false
}

// written runs write in one transaction with the check of session s's certificate
// (store.Tx.CheckAgent), and returns the check's refusal apart (also as err): from the
// commit that moved its node's or site's identity epoch on, nothing s says is written.
func (e *Endpoint) written(s *session, write func(tx *store.Tx) error) (refused, err error) {
	err = e.cfg.Store.Batch(func(tx *store.Tx) error {
		if refused = tx.CheckAgent(s.credential()); refused != nil {
			return refused
		}
		return write(tx)
	})
	return refused, err
}

// current checks the certificate of session s against its node or site as the store
// reads it now (store.Tx.CheckAgent).
func (e *Endpoint) current(s *session) error {
	return e.cfg.Store.View(func(tx *store.Tx) error { return tx.CheckAgent(s.credential()) })
}
