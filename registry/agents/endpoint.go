// Package agents is the registry's end of the agent plane: a QUIC endpoint (TLS 1.3,
// mutual TLS, ALPN bc-agent/1) that holds one session per agent, pushes each agent its
// NodeSpec whenever the generation moves (within a window of pushes not yet
// acknowledged, sized from the acknowledgements), records what the agent has applied and
// the inventory it reports, relays commands to it, keeping them in the store until they
// are answered, and answers its requests for secrets and a renewed certificate. It
// probes the path of a session whose RTT estimate a slow handshake left stale
// (remeasure.go). A stopping endpoint asks its fleet back in a stream at the rate the last return it
// measured supports. docs/agent-plane.md describes the protocol.
package agents

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/quic-go/quic-go"
)

// CommandTTL is how long a relayed command is kept, pending or answered (with its
// answer, which every later relay of its id gets): the registry's daily housekeeping
// forgets the older ones (Tx.ExpireAgentCommands). It is the longest a step may take (a
// profile's longest timeout), so no step still waits for a command that is forgotten.
const CommandTTL = 24 * time.Hour

// DefaultAckTimeout is how long a pushed NodeSpec waits for its acknowledgement in the
// push window.
const DefaultAckTimeout = 30 * time.Second

// DefaultIdleTimeout is how long a session may be silent before the endpoint ends it.
const DefaultIdleTimeout = 90 * time.Second

// The names of the endpoint's secrets in the store.
const (
	keyStatelessReset = "agent-stateless-reset-key"
	keySessionTickets = "agent-session-ticket-key"
)

// Config is what an endpoint is started with.
type Config struct {
	// Listen is the UDP address to serve on, host:port.
	Listen string
	// Certificate is the registry's server certificate. GetCertificate, if set, is asked
	// for it at each handshake instead (a certificate renewed while the endpoint runs).
	Certificate    tls.Certificate
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// AgentCAs are the CAs whose client certificates name agents: CommonName the node
	// id, OrganizationalUnit the role.
	AgentCAs *x509.CertPool
	// Store keeps NodeSpecs, agent status, inventory and pending commands.
	Store *store.Store
	// Log receives the endpoint's structured logs.
	Log *slog.Logger
	// OnInventory, if set, is called after an inventory section that changed is stored.
	// It runs on the agent's session and must return quickly (queue, do not work).
	OnInventory func(node, section string, data json.RawMessage)
	// OnObserved, if set, is called after an agent's applied generation is recorded (and
	// WaitObserved's waiters are woken). It must return quickly.
	OnObserved func(node string, generation int64)
	// OnSession, if set, is called once an agent's hello is recorded: the agent of node
	// in role is connected (a join, a reconnect or a reboot) since opened, when its
	// session opened, from the machine's boot bootID (its hello's proto.Hello.BootID, ""
	// when it sent none). It records the session and must return quickly. An error other
	// than INVALID_INPUT (the store failed to record it) ends the session with
	// CloseShutdown, so that the agent's next hello is told again (Endpoint.take has the
	// reasons); an INVALID_INPUT is logged and the session goes on.
	OnSession func(node string, role proto.Role, opened time.Time, bootID string) error
	// OnSessionEnd, if set, is called when the session of node's agent in role, opened at
	// opened, ended at at while the endpoint runs (not when Close ends it: the agent moves
	// to another registry; nor when a newer session of the node replaced it). It runs on
	// the agent's session.
	OnSessionEnd func(node string, role proto.Role, opened, at time.Time)
	// OnStop, if set, is called by Close before it tells any agent when to come back,
	// when it has sessions to tell: the last of them is asked back within returnIn (the
	// end of the stream, at most store.MaxReturnDelay), and one refused then tries again
	// within spread of it (the re-slot spread the stop names, which the stop's record
	// adds: store.Tx.RecordAgentStop). It returns once what it records is stored, so that
	// the agents told are known to be on their way back even if the registry dies while
	// it tells them.
	OnStop func(returnIn, spread time.Duration)
	// OnProgress, if set, is called with the progress reports an agent sends for a
	// command it runs, at most one every progressGap of Now. It must return quickly.
	OnProgress func(node, commandID string, detail json.RawMessage)
	// Expand, if set, completes a command as it is delivered to the agent of node in
	// role, with what must not be stored with it (a secret only that agent may read).
	// An error answers the command with it, and nothing is sent.
	Expand func(node string, role proto.Role, cmd proto.Command) (proto.Command, error)
	// Received, if set, makes what is stored of the result res that the agent of node
	// in role answered cmd with, its session's certificate being peer, the command
	// stored at sent (its createdAt): the registry's own reading of a node-signed result
	// (registry/attest). It runs on the command's stream and must not block.
	Received func(node string, role proto.Role, peer *x509.Certificate, cmd proto.Command, sent time.Time, res proto.Result) proto.Result
	// Secret, if set, answers an agent's secretRequest: the value of ref for the agent of
	// node in role, or why it does not get it (a *proto.Error). It runs on the agent's
	// session and must return quickly. Without it every request is UNSUPPORTED.
	Secret func(node string, role proto.Role, ref string) ([]byte, error)
	// Renew, if set, answers an agent's renewRequest: a certificate (DER) for the agent
	// whose certificate names c (its node, role, identity epoch and workflow run), and
	// the public key it sent (PKIX DER), or why it does not get one (a *proto.Error). It
	// runs on the agent's session and must return quickly. Without it every request is
	// UNSUPPORTED.
	Renew func(c proto.AgentCredential, publicKey []byte) ([]byte, error)
	// Now is the clock that dates a session's opening for OnSession and its end for
	// OnSessionEnd, and a stop in the return plan it stores (StoppedAt, which the store's
	// prune compares with its own clock, and the next start measures its restart from),
	// and spaces the progress reports told; time.Now when nil. The waits a stop asks of
	// its agents and the return's measures (handshake times, the saturated rate) are
	// durations, timed on the host's monotonic clock.
	Now func() time.Time
	// AckTimeout is how long a pushed NodeSpec holds its place in the push window
	// without an acknowledgement (DefaultAckTimeout when zero). An agent's
	// acknowledgement comes after its apply: a push still unacknowledged then gives its
	// place to another, and the window is halved as for a late acknowledgement.
	AckTimeout time.Duration
	// IdleTimeout ends a session that heard nothing from its agent for this long, or for
	// the agent's own idle timeout if that is shorter (DefaultIdleTimeout when zero). It
	// bounds how long a dead agent's session lasts, and so counts as present; agents
	// send within it (bcd pings every session.DefaultKeepAlive).
	IdleTimeout time.Duration
	// Replica, if set, names the endpoint's registry among the replicas sharing its store
	// (the replica id, registry.ReplicaFile): its return plan is kept under that name, so
	// that each replica plans its fleet's return from its own stop and its own machine's
	// measure. Empty for a registry alone on its store (bbolt): the plan is the store's.
	Replica string
	// Holder is the run of the registry the endpoint serves in, as the sessions it holds
	// are recorded (OnSession: store.AgentJoin.Holder, store.AgentSession.Holder).
	Holder store.Holder
	// Elsewhere, if set, is the registry replica that holds a session of node's agent in
	// role, as tx reads the store ("" when none does): a session of the agent that opens
	// here replaces it, and one recorded as opened by another registry (OnSession there)
	// replaces the session here. Without it the endpoint replaces only its own sessions.
	Elsewhere func(tx *store.Tx, node string, role proto.Role) (replica string, err error)
	// Keys, if set, are the endpoint's keys as the registry's replicas share them, sealed
	// (registry/pki). Without them the endpoint keeps its keys in the store, in the clear
	// (store.Tx.AgentKey); with them it removes those.
	Keys *Keys
}

// closingState is when Close began (at, on the host's monotonic clock, which times the
// waits the agents are told; stoppedAt, the same moment on the endpoint's clock, which
// dates the stop's record), how many sessions it had to tell, when the stream it asks of
// them starts (streamStart) and its rate (a second), and the spread within which one
// refused on its return tries again after the stream's end (reslotSpread).
type closingState struct {
	at        time.Time
	stoppedAt time.Time
	n         int
	start     time.Duration
	rate      float64
	spread    time.Duration
}

// Keys are the endpoint's own keys: its QUIC stateless reset key and its TLS session
// ticket key. Every endpoint that has them answers the others' agents as their own: a
// reset for a connection it does not hold, a resumption of a session another issued.
type Keys struct {
	StatelessReset, SessionTickets [32]byte
}

// Endpoint is a running agent endpoint.
type Endpoint struct {
	cfg    Config
	log    *slog.Logger
	tr     *quic.Transport
	ln     *quic.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	unhook func()
	adm    *admission
	// accepting counts the accept loops, setups the connections being set up (serve):
	// Close waits for both before it closes the transport, so that every agent is told
	// when to come back.
	accepting, setups sync.WaitGroup

	mu sync.Mutex
	// sessions are the connected agents, one per node and role: a machine's ramdisk and
	// its installed OS are two agents, each of which gets only what is for its role.
	sessions map[identity]*session
	// hellos are the connections whose hello is awaited, one per node and role
	// (awaitingHello): each may hold a partial hello of up to an agent frame.
	hellos map[identity]*quic.Conn
	// closing is when Close began, how many sessions it had to tell, and the stream it
	// asks of them (a second).
	closing closingState
	// plan is the return plan: the stream the next stop asks for, the admission bound,
	// and what the last measured return did.
	plan store.AgentReturn
	// turns are the agents (node and role) whose session replaced a connected one within
	// twinWindow, and those warned of within it (replacing); pruned once it holds
	// turnsPrune, or a window after turnsPruned.
	turns       map[identity]turn
	turnsPrune  int
	turnsPruned time.Time
	// paces are the paces the agents' (node and role) ended sessions left that are not
	// idle, for their next sessions (keepPace, paceOf); pruned of the idle ones once it
	// holds pacesPrune, or a lograte.Period after pacesPruned.
	paces       map[identity]*pace
	pacesPrune  int
	pacesPruned time.Time

	push pushQueue
	// window bounds the pushes written and not yet acknowledged.
	window *window
	calls  calls
	// pushes, acks and ackFailures count NodeSpecs pushed and agents' acks, for
	// monitoring (Pushes).
	pushes, acks, ackFailures atomic.Int64
	// replaced counts the sessions replaced while still connected (Replacements).
	replaced struct{ first, again atomic.Int64 }
	// observe wakes WaitObserved.
	observe observedSignal
	// probing holds a place for each session being probed (remeasure); remeasured and
	// probes count the sessions found stale and the probes sent (Paths).
	probing            chan struct{}
	remeasured, probes atomic.Int64
}

// Start listens on cfg.Listen and serves agents until Close.
func Start(cfg Config) (*Endpoint, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = DefaultAckTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	var resetKey, ticketKey [32]byte
	var plan store.AgentReturn
	err := cfg.Store.Update(func(tx *store.Tx) (err error) {
		stored, ok, err := tx.AgentReturn(cfg.Replica)
		if err != nil {
			return err
		}
		plan = startPlan(stored, ok)
		if cfg.Keys != nil {
			resetKey, ticketKey = cfg.Keys.StatelessReset, cfg.Keys.SessionTickets
			for _, name := range []string{keyStatelessReset, keySessionTickets} {
				if err := tx.DropAgentKey(name); err != nil {
					return err
				}
			}
		} else {
			if resetKey, err = tx.AgentKey(keyStatelessReset); err != nil {
				return err
			}
			if ticketKey, err = tx.AgentKey(keySessionTickets); err != nil {
				return err
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	addr, err := net.ResolveUDPAddr("udp", cfg.Listen)
	if err != nil {
		return nil, proto.Errorf(proto.InvalidConfig, "agent listen address %q: %v (use host:port)", cfg.Listen, err)
	}
	udp, err := net.ListenUDP("udp", addr)
	if err != nil {
		return nil, proto.Errorf(proto.InvalidConfig, "listen on udp %s: %v (pick another agent listen address)", cfg.Listen, err)
	}
	key := quic.StatelessResetKey(resetKey)
	adm := &admission{}
	adm.limit.Store(int64(plan.Admission))
	tr := &quic.Transport{Conn: udp, StatelessResetKey: &key, ConnContext: adm.admit, ConnectionIDLength: ConnectionIDLength}
	ln, err := tr.Listen(serverTLS(cfg, ticketKey), serverQUIC(cfg.IdleTimeout))
	if err != nil {
		tr.Close()
		udp.Close()
		return nil, err
	}
	plan = measureRestart(plan, cfg.Now())
	e := &Endpoint{cfg: cfg, log: cfg.Log, tr: tr, ln: ln, adm: adm, sessions: map[identity]*session{}, hellos: map[identity]*quic.Conn{}, plan: plan, probing: make(chan struct{}, remeasuring)}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.push.init()
	e.window = newWindow(time.Now, e.push.hand)
	e.calls.init()
	// The hooks hear of this registry's commits and (on etcd) the other replicas': a
	// node's identity that lets an agent here go, a session of an agent here opened at
	// another replica, a NodeSpec or a command for an agent whose session is here, an
	// answer or an applied generation someone here waits for.
	unhook := []func(){cfg.Store.OnNodeIdentity(e.identityChanged), cfg.Store.OnSiteIdentity(e.siteIdentityChanged), cfg.Store.OnNodeSpec(e.nodeSpecChanged),
		cfg.Store.OnAgentCommand(e.commandChanged), cfg.Store.OnWrite(e.observe.notify, store.BucketAgentStatus)}
	if cfg.Elsewhere != nil {
		unhook = append(unhook, cfg.Store.OnSessionOpened(e.sessionOpened))
	}
	e.unhook = func() {
		for _, fn := range unhook {
			fn()
		}
	}
	for range acceptors {
		e.accepting.Go(e.accept)
	}
	for range pushWorkers {
		e.wg.Go(e.pushWorker)
	}
	if plan.Told > 0 {
		e.wg.Go(func() { e.measureReturn(plan) })
	}
	return e, nil
}

// Addr is the UDP address the endpoint serves on.
func (e *Endpoint) Addr() net.Addr { return e.ln.Addr() }

// Sessions is the number of agents connected now.
func (e *Endpoint) Sessions() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.sessions)
}

// SessionsByRole is the number of agents connected now, by role.
func (e *Endpoint) SessionsByRole() map[proto.Role]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[proto.Role]int{}
	for _, s := range e.sessions {
		out[s.role]++
	}
	return out
}

// PushCounts counts the NodeSpecs the endpoint pushed and the agents' acks since Start.
type PushCounts struct {
	// Pushed were written to an agent's session; Acked were applied by the agent,
	// Failed were refused by it (its ack carried an error).
	Pushed, Acked, Failed int64
	// ReadFailures are the push workers' reads of the NodeSpecs to push that failed (the
	// store unavailable), each batch read again after a pause (pushRetryMin to
	// pushRetryMax).
	ReadFailures int64
}

// Pushes returns the endpoint's push and ack counts, for monitoring.
func (e *Endpoint) Pushes() PushCounts {
	return PushCounts{Pushed: e.pushes.Load(), Acked: e.acks.Load(), Failed: e.ackFailures.Load(), ReadFailures: e.push.readFailures()}
}

// Replacements counts the sessions a newer session of the same node and role replaced
// while they were still connected, since Start.
type Replacements struct {
	// Again were replaced within ten minutes of an earlier replacement of a session of
	// the same node: two agents hold the node's certificate and take turns, or its agent
	// was restarted twice while its old session lingered. First are the others: an agent
	// restarted while its old session lingered, or the first turn of two.
	First, Again int64
}

// Replacements returns the endpoint's replacement counts, for monitoring.
func (e *Endpoint) Replacements() Replacements {
	return Replacements{First: e.replaced.first.Load(), Again: e.replaced.again.Load()}
}

// Handshakes counts the endpoint's connection attempts since Start.
type Handshakes struct {
	// Accepted completed their handshake, Resumed of them by resuming a TLS session.
	Accepted, Resumed int64
	// Refused were refused at admission (too many handshakes in flight); each such agent
	// retries after its backoff. It counts first packets, not attempts: quic-go asks
	// admission for every Initial of a connection it has not made, and past four
	// refusals waiting to be sent drops the packet unanswered, so the agent sends it again
	// at its probe timeout and is counted again (RefusedAttempts counts attempts;
	// docs/benchmarks.md, "Fifteen runs on a slower host").
	Refused int64
	// RefusedAttempts are the attempts refused at admission by the agents' own count,
	// told in the hello of their next session: at most maxReported a hello, none from
	// agents of earlier versions.
	RefusedAttempts int64
	// Abandoned were admitted and ended before the endpoint accepted them: the handshake
	// failed or timed out, or completed while quic-go's queue of connections to accept
	// was full.
	Abandoned int64
}

// Handshakes returns the endpoint's handshake counts, for monitoring.
func (e *Endpoint) Handshakes() Handshakes {
	return Handshakes{Accepted: e.adm.admitted.Load(), Resumed: e.adm.resumed.Load(), Refused: e.adm.refused.Load(), RefusedAttempts: e.adm.reported.Load(), Abandoned: e.adm.abandoned.Load()}
}

// Paths summarises the QUIC paths of the sessions held now, for diagnosis. A push whose
// packet is lost on an idle session is sent again only after that session's probe
// timeout (RFC 9002, section 6.2: the smoothed RTT plus four times its variation, and
// the agent's acknowledgement delay), doubled with each probe lost in a row; and the
// registry's end of an idle session takes RTT samples only from what it sends (the
// handshake, a push, a command), so its probe timeout would stay what the session's
// first exchanges measured, on a busy host seconds, long after the path is fast again:
// the endpoint probes the path of a session whose estimate is stale (remeasure).
type Paths struct {
	// Sessions are those summarised.
	Sessions int
	// ProbeTimeoutMedian, ProbeTimeoutP99 and ProbeTimeoutMax are the median, the 99th
	// percentile and the longest of the sessions' probe timeouts (without the
	// acknowledgement delay, which quic-go does not report: 25 ms by default).
	ProbeTimeoutMedian, ProbeTimeoutP99, ProbeTimeoutMax time.Duration
	// PacketsSent and PacketsLost are the packets the registry sent on them, and those of
	// them QUIC declared lost, since each session began.
	PacketsSent, PacketsLost uint64
	// Remeasured counts the times a session's RTT estimate was found stale at a ping
	// (its probe timeout above max(1 s, 10 x its least RTT sample)) and its path
	// probed, and Probes the probes sent, since Start, sessions held now or not.
	Remeasured, Probes int64
}

// Paths returns the summary of the QUIC paths of the sessions held now.
func (e *Endpoint) Paths() Paths {
	e.mu.Lock()
	conns := make([]*quic.Conn, 0, len(e.sessions))
	for _, s := range e.sessions {
		conns = append(conns, s.conn)
	}
	e.mu.Unlock()
	stats := make([]quic.ConnectionStats, len(conns))
	for i, c := range conns {
		stats[i] = c.ConnectionStats()
	}
	p := pathsOf(stats)
	p.Remeasured, p.Probes = e.remeasured.Load(), e.probes.Load()
	return p
}

// pathsOf summarises the stats of the sessions' connections (Paths).
func pathsOf(stats []quic.ConnectionStats) Paths {
	p := Paths{Sessions: len(stats)}
	if len(stats) == 0 {
		return p
	}
	ptos := make([]time.Duration, len(stats))
	for i, st := range stats {
		ptos[i] = probeTimeout(st)
		p.PacketsSent += st.PacketsSent
		p.PacketsLost += st.PacketsLost
	}
	slices.Sort(ptos)
	p.ProbeTimeoutMedian, p.ProbeTimeoutP99, p.ProbeTimeoutMax = ptos[len(ptos)/2], ptos[len(ptos)*99/100], ptos[len(ptos)-1]
	return p
}

// Close tells every connected agent that the registry is going away, stops serving and
// waits for the endpoint's goroutines. New connection attempts go unanswered from the
// start of Close, as they would while the registry process is down: an agent's dial
// keeps retrying its first packet for its handshake timeout and finds the next registry
// without backing off further. Nothing pending is lost: it is in the store.
func (e *Endpoint) Close() error {
	e.unhook()
	e.mu.Lock()
	e.cancel() // under mu: spawn starts nothing and register registers nothing after this
	e.closing.at, e.closing.stoppedAt = time.Now(), e.cfg.Now()
	e.closing.n, e.closing.rate = len(e.sessions), e.plan.Rate
	e.closing.start = streamStart(e.closing.n, e.plan)
	streamEnd := returnDelay(e.closing.start, e.closing.n, 0, e.closing.rate)
	e.closing.spread = reslotSpread(e.plan, streamEnd)
	closing := e.closing
	e.mu.Unlock()
	if closing.n > 0 && e.cfg.OnStop != nil {
		e.cfg.OnStop(streamEnd, closing.spread)
		// The stream is timed from the moment its record is stored, not from the start
		// of the close: a store slow to commit (etcd out of reach, until its request
		// timeout) delays the stream instead of squeezing it into a herd of agents whose
		// moments passed while it waited.
		e.mu.Lock()
		e.closing.at, e.closing.stoppedAt = time.Now(), e.cfg.Now()
		e.mu.Unlock()
	}
	err := e.ln.Close()
	e.accepting.Wait()
	e.closeSessions()
	e.setups.Wait() // each tells its agent to come back (comeBackLater) while it still can
	if terr := e.tr.Close(); err == nil {
		err = terr
	}
	for _, q := range e.push.close() {
		e.window.release(q.slot)
	}
	e.wg.Wait()
	if terr := e.tr.Conn.Close(); err == nil && !errors.Is(terr, net.ErrClosed) {
		err = terr
	}
	e.mu.Lock()
	plan := e.plan
	plan.Told, plan.StoppedAt = e.closing.n, e.closing.stoppedAt
	e.mu.Unlock()
	if perr := e.cfg.Store.Update(func(tx *store.Tx) error { return tx.PutAgentReturn(e.cfg.Replica, plan) }); err == nil {
		err = perr
	}
	return err
}

// closeSessions tells every connected agent that the registry is going away, when to
// come back (returnDelay) and when the stream of returning agents ends, so that the fleet
// returns in a steady stream at the planned rate rather than as a herd. It works on
// closers sessions at a time (a close waits for its connection to wind down).
//
// An agent that reads a shutdown message (proto.Hello.ReadsShutdown) is told on its
// session stream first (tellShutdown), which QUIC sends again until the agent
// acknowledges it; the agent then closes the connection itself. Its connection is
// closed with CloseShutdown too, with the same moment, once it has ended or shutdownWait
// after the last agent was told: the close is one packet, sent once, and an agent whose
// close was lost learnt of the stop only at its next ping. Other agents get the close
// alone, at once.
func (e *Endpoint) closeSessions() {
	e.mu.Lock()
	sessions := make(chan *session, len(e.sessions))
	for _, s := range e.sessions {
		sessions <- s
	}
	closing := e.closing
	e.mu.Unlock()
	close(sessions)
	// told counts the agents told, under mu with the instant each reason is read at, so
	// that the k-th agent's moment is read at the k-th instant: the moments follow the
	// order the agents are told in, also for those told after their slot had passed.
	var mu sync.Mutex
	told := 0
	waiting := make(chan toldSession, cap(sessions))
	var wg sync.WaitGroup
	for range closers {
		wg.Go(func() {
			for s := range sessions {
				mu.Lock()
				k := told
				reason := closing.reason(k)
				told++
				mu.Unlock()
				if s.readsShutdown && tellShutdown(s, reason) {
					waiting <- toldSession{s.conn, k}
					continue
				}
				s.conn.CloseWithError(codeShutdown, reason)
			}
		})
	}
	wg.Wait()
	close(waiting)
	// The agents told on their streams close their connections as they read it; those
	// that have not by the deadline (the message still on its way, or an agent gone) get
	// the close, naming the same moment from now.
	ctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	for range closers {
		wg.Go(func() {
			for t := range waiting {
				select {
				case <-t.conn.Context().Done():
				case <-ctx.Done():
				}
				t.conn.CloseWithError(codeShutdown, closing.reason(t.k))
			}
		})
	}
	wg.Wait()
}

// toldSession is the connection of the k-th agent told, on its session stream, that
// the registry stops.
type toldSession struct {
	conn *quic.Conn
	k    int
}

// tellShutdown writes the shutdown message of reason on the session stream of s, and
// reports whether it did: a stream being written (a push) or one the agent does not
// read within shutdownWait is left to the close alone.
func tellShutdown(s *session, reason string) bool {
	if !s.wmu.TryLock() {
		return false
	}
	defer s.wmu.Unlock()
	s.stream.SetWriteDeadline(time.Now().Add(shutdownWait))
	return proto.WriteMessage(s.stream, &proto.Message{Type: proto.MsgShutdown, Shutdown: &proto.Shutdown{Reason: reason}}) == nil
}

// shutdownWait is how long a stopping endpoint waits, after the last agent told on its
// session stream, for the agents so told to close their connections before it closes
// them itself: long enough for QUIC to send a lost message again a few times on a
// healthy path (its probe timeout there is tens of milliseconds), short enough that
// agents gone without a word delay the stop by no more than it.
const shutdownWait = time.Second

// reason is the close reason of the k-th agent told: its moment (returnDelay), the
// stream's end (that of the n-th), from now, and the re-slot spread.
func (c closingState) reason(k int) string {
	elapsed := time.Since(c.at)
	return proto.ShutdownReason(returnDelay(c.start, k, elapsed, c.rate), returnDelay(c.start, c.n, elapsed, c.rate), c.spread)
}

// returnDelay is how long the k-th agent told, told at elapsed since the close began, is
// asked to wait: until its own moment, k/rate after the stream's start (streamStart),
// and at most maxReturn after the close began.
func returnDelay(start time.Duration, k int, elapsed time.Duration, rate float64) time.Duration {
	at := start + time.Duration(float64(k)/rate*float64(time.Second))
	return max(0, min(at, maxReturn)-elapsed)
}

const (
	// closers is how many connections Close winds down at once.
	closers = 256
	// closeRate is about how many sessions a second Close winds down on two cores
	// (10,000 in 0.9 to 1.7 s).
	closeRate = 8000
	// maxReturn caps the wait an agent is asked for.
	maxReturn = store.MaxReturnDelay
)

// ConnectionIDLength is the length in bytes of the connection ids the agent endpoint
// chooses for its connections, and of those of any QUIC transport that many connections
// share (the benchmark's agent processes). QUIC routes every packet to its connection by
// the id it carries. quic-go gives each connection four ids, the one chosen in the
// handshake and three issued after it, random; an agent moves to the first issued one as
// soon as its handshake completes. An id issued while a live connection holds it is
// issued all the same, and stays the live one's: the new connection's agent then sends
// to a connection that cannot decrypt its packets and drops them. The agent's handshake
// completes on its side, its hello never arrives, and it learns of it only when its
// keep-alive gives up on the registry, 15-25 s later; a return waits for it. With 40,000
// ids held at 10,000 sessions and quic-go's default of 4 bytes, a return of 10,000 agents
// hit a held id about once in eleven returns (10,000 x 40,000 / 2^32); with 8 bytes,
// once in 10^10.
const ConnectionIDLength = 8

// acceptors are the goroutines accepting connections. quic-go refuses a connection that
// completes its handshake while its queue of 32 connections to accept is full, wasting
// the handshake; in a reconnect storm one goroutine waiting its turn for the processor
// can let the queue fill (the benchmark's bare listener, with one, lost connections so).
const acceptors = 4

// accept serves each new connection on its own goroutine until the listener closes.
func (e *Endpoint) accept() {
	for {
		conn, err := e.ln.Accept(e.ctx)
		if err != nil {
			return
		}
		e.adm.accepted(conn)
		e.setups.Add(1)
		e.wg.Go(func() {
			defer e.setups.Done()
			e.serve(conn)
		})
	}
}

// identityChanged is the store's hook for nodes whose identity changed, or whose
// workflow began or ended, this registry's commits and (on etcd) the other replicas':
// it ends the sessions of the node's agents (its installed OS's and its ramdisk's)
// whose certificates the node as stored no longer passes (store.NodeChange.CheckAgent),
// with CloseRevoked: its identity was revoked (metal.revokeIdentity), a workflow took
// the machine away from the installation they belong to (a deploy, a release or a
// retire moves the identity epoch as it starts, and a ramdisk booted before it is not
// the one the workflow boots), or the workflow run a ramdisk's certificate names ended
// (reason run-ended; a rescue that succeeded leaves its ramdisk up until the node's
// next workflow). Each agent's next hello is refused the same way. It reads nothing:
// the commit that changed the node tells it, before anything a later commit relays or
// pushes looks for the node's sessions.
func (e *Endpoint) identityChanged(n store.NodeChange) {
	for _, role := range proto.MachineRoles {
		if s := e.session(n.ID, role); s != nil {
			e.letGo(s, n.CheckAgent(s.credential()))
		}
	}
}

// siteIdentityChanged is identityChanged for a site whose agent's certificates an
// operator revoked (sites revoke-identity): the site agent's session ends when its
// certificate no longer passes store.Site.CheckAgent. A site agent's id is its site's
// name (site.Agent).
func (e *Endpoint) siteIdentityChanged(st store.Site) {
	if s := e.session(st.ID, proto.RoleSite); s != nil {
		e.letGo(s, st.CheckAgent(s.epoch))
	}
}

// letGo ends session s when err, its certificate checked against its node
// (store.Tx.CheckAgent), is set, and reports whether it was: nothing more is sent on the
// session. A refusal (FORBIDDEN: the identity revoked, or the certificate of an earlier
// installation) closes it with CloseRevoked; a store that could not be read, as serve
// does, with CloseShutdown, and the agent's next hello checks again.
func (e *Endpoint) letGo(s *session, err error) bool {
	switch {
	case err == nil:
		return false
	case proto.CodeOf(err) == proto.Forbidden:
		e.log.Warn("agent session ended", "node", s.node, "role", s.role, "err", err)
		e.end(s, codeRevoked, err.Error())
	default:
		e.log.Error("agent identity", "node", s.node, "role", s.role, "err", err)
		e.end(s, codeShutdown, "registry failed to read the node")
	}
	return true
}

// Connected reports whether node's agent of role has a session now.
func (e *Endpoint) Connected(node string, role proto.Role) bool {
	return e.session(node, role) != nil
}

// session returns the connected session of node's agent of role, if any.
func (e *Endpoint) session(node string, role proto.Role) *session {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sessions[identity{node, role}]
}
