// Package session is bcd's end of the agent plane: one QUIC session to the registry that
// says hello with the generation the agent has applied and its inventory, applies each
// NodeSpec the registry pushes and acknowledges it, runs relayed commands at most once
// per id (signing the results that must be proved with the agent's key), asks the
// registry for the secrets a unit needs, renews the agent's certificate before it
// expires, and reconnects with backoff whenever the link drops. The bcd modes call it as
// a library; docs/agent-plane.md describes the protocol.
package session

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/quic-go/quic-go"
)

// Handler runs one kind of relayed command and returns its result as JSON. An error that
// is not a *proto.Error reaches the registry as DRIVER_ERROR.
type Handler func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error)

// Config is what an agent session is made with.
type Config struct {
	// Addr is the registry's agent endpoint, host:port (UDP).
	Addr string
	// Addrs are more agent endpoints of the same registry, its replicas'. The agent
	// connects to one of Addr and Addrs chosen at random, and to another chosen at random
	// whenever a connection fails or drops: an agent whose replica is gone is back on
	// another after one backoff, resuming its TLS session there when the replicas share
	// their session ticket key, and a dead replica's agents spread over the others.
	Addrs []string
	// ServerName is the name the registry's certificate must hold; each endpoint's own
	// host when empty.
	ServerName string
	// Certificate is the agent's client certificate, from the registry's agent CA; Renew
	// replaces it for later connections.
	Certificate tls.Certificate
	// ServerCAs are the CAs trusted for the registry's certificate.
	ServerCAs *x509.CertPool
	// ObservedGeneration is the NodeSpec generation the agent had applied when it
	// started (the mode keeps it across restarts); 0 for none.
	ObservedGeneration int64
	// Inventory holds the inventory sections to report in the first hello.
	Inventory map[string]json.RawMessage
	// BootID is the boot id of the machine the agent runs on, sent in every hello
	// (proto.Hello.BootID): bcd ramdisk and bcd node read it with ReadBootID. Empty
	// sends none.
	BootID string
	// Apply makes a pushed NodeSpec take effect; its generation is acknowledged once it
	// returns nil. Nil accepts every spec as it is.
	Apply func(ctx context.Context, spec proto.NodeSpec) error
	// Handlers run relayed commands by kind; a kind without one is UNSUPPORTED.
	Handlers map[string]Handler
	// Log receives the session's structured logs.
	Log *slog.Logger
	// Backoff is the reconnect policy.
	Backoff Backoff
	// KeepAlive is how often the agent sends a ping on its session (DefaultKeepAlive when
	// zero). A registry restarted after a crash answers the next ping with a stateless
	// reset; a link that stays silent for four periods is dead, so it bounds how long a
	// dead registry or link goes unnoticed.
	KeepAlive time.Duration
	// Transport, if set, carries the connection on its UDP socket, which many agents of
	// one process (a load test) can share. Each connection makes its own socket otherwise.
	Transport *quic.Transport
	// KeepResults is how many of each tenant's recent command results are remembered
	// whatever other tenants run, to answer a resent command without running it again
	// (DefaultKeepResults when zero). More are kept, up to keptShares times it in all
	// (commands).
	KeepResults int
	// Clock times the reconnect backoff, the keep-alive pings and the renewal checks, and
	// stamps signed results; clock.Real when nil. QUIC's own deadlines and timeouts run
	// on the system clock.
	Clock clock.Clock
}

// Defaults of Config.
const (
	DefaultKeepAlive   = 25 * time.Second
	DefaultKeepResults = 256
)

// ioTimeout bounds a write of one frame and the wait for a command on a new stream.
const ioTimeout = 10 * time.Second

// handshakeTimeout gives up a dial that hears nothing from the registry for this long
// (its first packets are retried within it); the backoff then decides the next try. A
// registry that drops the first packets of a reconnect storm is thus tried again soon.
const handshakeTimeout = 5 * time.Second

// pingTimeout is how long after a ping an agent waits for any packet of the registry
// (at the least the acknowledgement of the ping, which QUIC sends within 25 ms, and
// again while packets are lost) before it takes the registry for gone: long enough for
// a registry whose processors are saturated (a reconnect storm) to answer.
const pingTimeout = 10 * time.Second

// Agent is one agent's session with the registry.
type Agent struct {
	cfg      Config
	node     string // the node id, as the certificate names it
	log      *slog.Logger
	quicConf *quic.Config
	// endpoints are the registry's agent endpoints; next is the one the next connection
	// dials (Run's alone).
	endpoints []endpoint
	next      int
	specs     chan proto.NodeSpec // the latest pushed spec not yet applied
	tickets   *ticketCache
	cmds      commands
	wg        sync.WaitGroup
	// refused counts this agent's connection attempts the registry refused at admission
	// (Refused); unreported are those of them since the last hello sent (Run's alone).
	// unanswered counts those that heard nothing from it (Unanswered).
	refused    atomic.Int64
	unreported int64
	unanswered atomic.Int64

	certMu sync.Mutex
	cert   tls.Certificate // the client certificate of the next connection

	mu        sync.Mutex
	conn      *quic.Conn   // the current connection, nil between connections
	stream    *quic.Stream // its session stream, once the hello is sent
	observed  int64
	inventory map[string]json.RawMessage
	// up is closed once a session's hello is sent, and replaced when the session ends.
	up chan struct{}
	// calls are the requests (secret, renewal) awaiting their answer, by id; callSeq
	// numbers them.
	calls   map[string]chan callResult
	callSeq uint64
}

// New makes an agent session; Run connects it.
func New(cfg Config) (*Agent, error) {
	if len(cfg.Certificate.Certificate) == 0 {
		return nil, proto.Errorf(proto.InvalidConfig, "the agent has no client certificate: join first")
	}
	leaf, err := x509.ParseCertificate(cfg.Certificate.Certificate[0])
	if err != nil {
		return nil, proto.Errorf(proto.InvalidConfig, "agent certificate: %v", err)
	}
	if err := proto.CheckBootID(cfg.BootID); err != nil {
		return nil, proto.Errorf(proto.InvalidConfig, "%s", proto.AsError(err).Message).WithPath("bootID")
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.KeepResults == 0 {
		cfg.KeepResults = DefaultKeepResults
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	a := &Agent{
		cert:    cfg.Certificate,
		tickets: &ticketCache{},
		cfg:     cfg,
		node:    leaf.Subject.CommonName,
		log:     cfg.Log.With("node", leaf.Subject.CommonName),
		quicConf: &quic.Config{
			HandshakeIdleTimeout:           handshakeTimeout,
			MaxIdleTimeout:                 4 * cfg.KeepAlive, // keepAlive pings keep it busy
			MaxIncomingStreams:             maxCommands,
			MaxIncomingUniStreams:          -1,
			InitialStreamReceiveWindow:     64 << 10,
			MaxStreamReceiveWindow:         8 << 20,
			InitialConnectionReceiveWindow: 128 << 10,
			MaxConnectionReceiveWindow:     16 << 20,
			DisablePathMTUDiscovery:        true,
		},
		specs:     make(chan proto.NodeSpec, 1),
		observed:  cfg.ObservedGeneration,
		inventory: maps.Clone(cfg.Inventory),
		up:        make(chan struct{}),
		calls:     map[string]chan callResult{},
	}
	if a.cert.Leaf == nil {
		a.cert.Leaf = leaf
	}
	tlsConf := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The certificate Renew last installed, else Config.Certificate.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return a.certificate(), nil },
		RootCAs:              cfg.ServerCAs,
		NextProtos:           []string{proto.AgentALPN},
		CurvePreferences:     []tls.CurveID{tls.X25519},
		// A reconnect resumes the last session: no certificate to sign or verify.
		ClientSessionCache: a.tickets,
	}
	if a.endpoints, err = endpoints(cfg, tlsConf); err != nil {
		return nil, err
	}
	a.next = rand.IntN(len(a.endpoints))
	if a.inventory == nil {
		a.inventory = map[string]json.RawMessage{}
	}
	a.cmds.init(cfg.KeepResults)
	return a, nil
}

// Run keeps the session up until ctx ends: it connects, and after every drop waits as
// the backoff says and connects again. It returns once everything it started is done.
// Failures are logged and retried, never returned: a registry that refuses the agent
// now (a certificate not yet trusted, a registry not yet up) may accept it later.
func (a *Agent) Run(ctx context.Context) {
	defer a.wg.Wait()
	ctx = context.WithValue(ctx, agentKey{}, a) // handlers sign with it (SignResult)
	a.wg.Go(func() { a.applyLoop(ctx) })
	var tries retries
	for {
		established, err := a.connect(ctx)
		if ctx.Err() != nil {
			return
		}
		code, reason := closedBy(err)
		if code == proto.CloseRevoked {
			a.log.Error("the registry refuses this agent's certificate for good: the node's identity was revoked (the machine was retired), "+
				"the certificate belongs to an earlier installation (the machine was released or deployed again since), "+
				"or an operator revoked it (revoke-identity): stop bcd, or join again with a new token", "reason", reason)
		}
		delay := tries.next(a.cfg.Clock.Now(), a.cfg.Backoff, established, code, reason)
		a.log.Info("registry session lost, reconnecting", "err", err, "attempt", tries.failed, "in", delay)
		if clock.Sleep(ctx, a.cfg.Clock, delay) != nil {
			return
		}
	}
}

// retries decides the wait before each try to reconnect.
type retries struct {
	// failed counts the tries since the last session.
	failed int
	// backoff counts the tries the backoff decides, since the last session or the last
	// re-slotted try: an agent refused more often than it re-slots itself starts the
	// backoff again from its shortest step after the stream, rather than at the step its
	// re-slotted tries would have reached (4-8 s after three with the defaults).
	backoff int
	// ret is the stream a stopping registry last put this agent in.
	ret returnStream
}

// next is the wait after a try: established says whether it held a session, code and
// reason are how the registry closed it, if it did.
func (r *retries) next(now time.Time, b Backoff, established bool, code proto.CloseCode, reason string) time.Duration {
	if established {
		*r = retries{}
	}
	r.failed++
	delay := b.Delay(r.backoff)
	r.backoff++
	if !established {
		if d, ok := r.ret.reslot(now, b); ok {
			delay, r.backoff = d, 0
		}
	}
	switch code {
	case proto.CloseReplaced, proto.CloseRevoked:
		delay = b.Delay(maxAttempt)
	case proto.CloseShutdown:
		if d, ok := proto.ShutdownDelay(reason); ok {
			delay = d
		}
		if end, ok := proto.ShutdownStreamEnd(reason); ok {
			spread, ok := proto.ShutdownReslotSpread(reason)
			if !ok {
				spread = proto.ReslotSpread(end) // an older registry's phrase
			}
			r.ret = returnStream{end: now.Add(end), spread: spread, left: proto.ReslotTries}
		}
	}
	return delay
}

// returnStream is the stream of returning agents a stopping registry named: when it ends,
// over how long an agent refused on its return spreads its next try after that, and how
// many more times it re-slots itself so.
type returnStream struct {
	end    time.Time
	spread time.Duration
	left   int
}

// reslot is the wait of an agent whose attempt to return failed (refused at admission,
// or timed out) at now: it comes back after the stream it was told of ends, at a random
// moment within the spread, rather than on top of the stream and with a growing backoff;
// after the stream's end (a registry that took longer to restart than the stream lasted),
// at a random moment within the spread from now. ok is false without a stream named, or
// after proto.ReslotTries re-slotted tries (the backoff decides).
func (r *returnStream) reslot(now time.Time, b Backoff) (time.Duration, bool) {
	if r.left == 0 {
		return 0, false
	}
	r.left--
	return max(r.end.Sub(now), 0) + b.within(r.spread), true
}

// maxAttempt is an attempt number whose delay is the backoff's longest.
const maxAttempt = 1 << 20

// closedBy returns the close code and reason with which the registry closed the
// connection, if err says it did; a shutdown message (shutdownTold) reads as the
// CloseShutdown of its reason.
func closedBy(err error) (proto.CloseCode, string) {
	if ae, ok := errors.AsType[*quic.ApplicationError](err); ok && ae.Remote {
		return proto.CloseCode(ae.ErrorCode), ae.ErrorMessage
	}
	if s, ok := errors.AsType[shutdownTold](err); ok {
		return proto.CloseShutdown, s.reason
	}
	return proto.CloseNormal, ""
}

// shutdownTold ends a session whose registry said on the session stream that it stops
// (proto.MsgShutdown), with the reason its CloseShutdown would carry. The message is
// sent again until it arrives, where the close is one packet: an agent whose close was
// lost heard of the stop only at its next ping, up to a keep-alive period later, and
// came back then, outside the stream it was never told of.
type shutdownTold struct{ reason string }

func (s shutdownTold) Error() string { return "the registry is stopping: " + s.reason }

// Connected reports whether the agent holds a session with the registry now.
func (a *Agent) Connected() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conn != nil
}

// Refused is how many of the agent's connection attempts the registry refused at
// admission (too many handshakes in flight): one an attempt, however many copies of its
// first packet the registry refused while the attempt waited for the refusal (the
// registry's own count, agents.Handshakes.Refused, counts each copy).
func (a *Agent) Refused() int64 { return a.refused.Load() }

// Unanswered is how many of the agent's connection attempts heard nothing from the
// registry within the handshake's timeout: a registry down or unreachable, or one whose
// refusals at admission were lost or never sent (its transport drops those past the
// four waiting to be sent).
func (a *Agent) Unanswered() int64 { return a.unanswered.Load() }

// ObservedGeneration is the NodeSpec generation the agent has applied.
func (a *Agent) ObservedGeneration() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.observed
}

// SetInventory replaces one inventory section: it is sent now if the agent is
// connected, and in every later hello.
func (a *Agent) SetInventory(section string, data json.RawMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inventory[section] = data
	a.sendLocked(&proto.Message{Type: proto.MsgInventory, Inventory: &proto.Inventory{Section: section, Data: data}})
}

// Acknowledge tells the registry that generation is applied after its Apply failed (a
// later pass of the agent applied it). Unconnected, the next hello reports it.
func (a *Agent) Acknowledge(generation int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.observed = generation
	a.sendLocked(&proto.Message{Type: proto.MsgAck, Ack: &proto.Ack{Generation: generation}})
}

// connect runs one connection: dial, hello, then read pushed specs and the answers to
// secret requests until it ends.
// established reports whether the hello went out.
func (a *Agent) connect(ctx context.Context) (established bool, err error) {
	conn, err := a.dial(ctx)
	if err != nil {
		return false, err
	}
	defer conn.CloseWithError(codeNormal, "")
	stop := context.AfterFunc(ctx, func() { conn.CloseWithError(codeNormal, "agent stopping") })
	defer stop()
	stream, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return false, err
	}
	a.mu.Lock()
	refused := a.unreported
	hello := proto.Hello{ObservedGeneration: a.observed, Inventory: a.inventory, BootID: a.cfg.BootID, RefusedAttempts: &refused, ReadsShutdown: true}
	stream.SetWriteDeadline(time.Now().Add(ioTimeout))
	err = proto.WriteMessage(stream, &proto.Message{Type: proto.MsgHello, Hello: &hello})
	if err == nil {
		a.conn, a.stream = conn, stream
		a.unreported = 0
		close(a.up)
	}
	a.mu.Unlock()
	if err != nil {
		return false, err
	}
	defer func() {
		a.mu.Lock()
		a.conn, a.stream = nil, nil
		a.sessionEndedLocked(err)
		a.mu.Unlock()
	}()
	a.log.Debug("registry session established", "observedGeneration", hello.ObservedGeneration)
	a.wg.Go(func() { a.acceptCommands(ctx, conn) })
	a.wg.Go(func() { a.keepAlive(conn) })
	for {
		m, err := proto.ReadMessage(stream)
		if err == nil && m.Type == proto.MsgSecret {
			a.answered(m.Secret.ID, &m)
			continue
		}
		if err == nil && m.Type == proto.MsgRenewal {
			a.answered(m.Renewal.ID, &m)
			continue
		}
		if err == nil && m.Type == proto.MsgShutdown {
			return true, shutdownTold{m.Shutdown.Reason}
		}
		if err == nil && m.Type != proto.MsgSpec {
			err = proto.Errorf(proto.InvalidInput, "the registry sent a %q on the session stream", m.Type)
		}
		if proto.CodeOf(err) == proto.InvalidInput {
			conn.CloseWithError(codeProtocol, "unexpected message")
		}
		if err != nil {
			return true, err
		}
		select { // the newest spec replaces one not applied yet
		case <-a.specs:
		default:
		}
		a.specs <- *m.Spec
	}
}

// keepAlive sends a ping on the session stream every KeepAlive period until conn ends.
// QUIC's own keep-alive packet is too small for a registry restarted after a crash to
// answer with a stateless reset (quic-go answers no packet of 42 bytes or fewer), which
// left the agent waiting for its idle timeout; a ping's packet is answered, and the
// agent learns at once that its session is gone. A registry that is gone altogether (its
// machine or process killed) answers nothing, not even the acknowledgement QUIC owes the
// ping within milliseconds: when no packet at all has come from it pingTimeout after a
// ping, the agent gives the session up and connects to another endpoint, rather than
// waiting for its idle timeout (four periods).
// Periods of pingTimeout or less (tests') leave it to the idle timeout.
func (a *Agent) keepAlive(conn *quic.Conn) {
	check := a.cfg.KeepAlive > pingTimeout
	wait := a.cfg.KeepAlive
	if check {
		wait -= pingTimeout
	}
	for clock.Sleep(conn.Context(), a.cfg.Clock, wait) == nil {
		received := conn.ConnectionStats().PacketsReceived
		a.mu.Lock()
		a.sendLocked(&proto.Message{Type: proto.MsgPing})
		a.mu.Unlock()
		if !check {
			continue
		}
		if clock.Sleep(conn.Context(), a.cfg.Clock, pingTimeout) != nil {
			return
		}
		if conn.ConnectionStats().PacketsReceived == received {
			a.log.Warn("the registry answered nothing to a ping: giving its session up for another endpoint", "within", pingTimeout)
			conn.CloseWithError(codeNormal, "the registry answered nothing to a ping")
			return
		}
	}
}

// The close codes of proto, as quic-go takes them.
const (
	codeNormal   = quic.ApplicationErrorCode(proto.CloseNormal)
	codeProtocol = quic.ApplicationErrorCode(proto.CloseProtocol)
	// codeWithdrawn resets a command's stream only (proto.CloseWithdrawn).
	codeWithdrawn = quic.StreamErrorCode(proto.CloseWithdrawn)
)

// endpoint is one of the registry's agent endpoints, and the TLS configuration that
// dials it (its ServerName).
type endpoint struct {
	addr string
	tls  *tls.Config
}

// endpoints are Config.Addr and Config.Addrs, each once, with the TLS configuration of
// each.
func endpoints(cfg Config, base *tls.Config) ([]endpoint, error) {
	var out []endpoint
	for _, addr := range append([]string{cfg.Addr}, cfg.Addrs...) {
		if addr == "" || slices.ContainsFunc(out, func(e endpoint) bool { return e.addr == addr }) {
			continue
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, proto.Errorf(proto.InvalidConfig, "registry agent endpoint %q: %v (use host:port)", addr, err)
		}
		conf := base.Clone()
		conf.ServerName = cfg.ServerName
		if conf.ServerName == "" {
			conf.ServerName = host
		}
		out = append(out, endpoint{addr: addr, tls: conf})
	}
	if len(out) == 0 {
		return nil, proto.Errorf(proto.InvalidConfig, "no registry agent endpoint: join again with a registry that runs the agent endpoint")
	}
	return out, nil
}

// dial connects to the endpoint pick gives.
func (a *Agent) dial(ctx context.Context) (*quic.Conn, error) {
	ep := a.pick()
	var conn *quic.Conn
	var err error
	if a.cfg.Transport == nil {
		conn, err = quic.DialAddr(ctx, ep.addr, ep.tls, a.quicConf)
	} else {
		var addr *net.UDPAddr
		if addr, err = net.ResolveUDPAddr("udp", ep.addr); err != nil {
			return nil, err
		}
		conn, err = a.cfg.Transport.Dial(ctx, addr, ep.tls, a.quicConf)
	}
	if err != nil && refusedOrUnanswered(err) {
		a.tickets.notTheTicket()
	}
	if refusedAtAdmission(err) {
		a.refused.Add(1)
		a.unreported++
	}
	if timedOut(err) {
		a.unanswered.Add(1)
	}
	return conn, err
}

// pick returns the endpoint next names, and moves next on to another endpoint chosen at
// random, for the connection after this one: whether this one fails now or drops later,
// the next is made to another replica, and the agents of a replica that died spread
// evenly over the others rather than all moving to the one after it.
func (a *Agent) pick() endpoint {
	ep := a.endpoints[a.next]
	if n := len(a.endpoints); n > 1 {
		a.next = (a.next + 1 + rand.IntN(n-1)) % n
	}
	return ep
}

// sendLocked writes m on the session stream, if there is one; a.mu is held. A failed
// write closes the connection, and the next hello carries what was lost.
func (a *Agent) sendLocked(m *proto.Message) {
	if a.stream == nil {
		return
	}
	a.stream.SetWriteDeadline(time.Now().Add(ioTimeout))
	if err := proto.WriteMessage(a.stream, m); err != nil {
		a.conn.CloseWithError(codeProtocol, "write failed")
	}
}

// applyLoop applies pushed specs one at a time, always the newest, and acknowledges each.
func (a *Agent) applyLoop(ctx context.Context) {
	for {
		var spec proto.NodeSpec
		select {
		case <-ctx.Done():
			return
		case spec = <-a.specs:
		}
		err := a.apply(ctx, spec)
		if ctx.Err() != nil {
			return
		}
		ack := proto.Ack{Generation: spec.Generation}
		a.mu.Lock()
		if err == nil {
			a.observed = spec.Generation
		} else {
			ack.Error = agentError("apply NodeSpec", err)
			a.log.Warn("apply NodeSpec", "generation", spec.Generation, "err", err)
		}
		a.sendLocked(&proto.Message{Type: proto.MsgAck, Ack: &ack})
		a.mu.Unlock()
	}
}

func (a *Agent) apply(ctx context.Context, spec proto.NodeSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if spec.Node != a.node {
		return proto.Errorf(proto.InvalidConfig, "NodeSpec of node %q pushed to agent %q", spec.Node, a.node).WithPath("node")
	}
	if a.cfg.Apply == nil {
		return nil
	}
	return a.cfg.Apply(ctx, spec)
}
