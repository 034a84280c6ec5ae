package agents

import (
	"crypto/tls"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/quic-go/quic-go"
)

// The close codes of proto, as quic-go takes them.
const (
	codeShutdown = quic.ApplicationErrorCode(proto.CloseShutdown)
	codeReplaced = quic.ApplicationErrorCode(proto.CloseReplaced)
	codeProtocol = quic.ApplicationErrorCode(proto.CloseProtocol)
	codeRevoked  = quic.ApplicationErrorCode(proto.CloseRevoked)
	// codeWithdrawn resets a command's stream only (proto.CloseWithdrawn).
	codeWithdrawn = quic.ApplicationErrorCode(proto.CloseWithdrawn)
)

// Timeouts of the endpoint.
const (
	// helloTimeout bounds the wait for an agent's hello after the handshake.
	helloTimeout = 10 * time.Second
	// writeTimeout bounds a write of one frame; a stuck agent is disconnected.
	writeTimeout = 10 * time.Second
)

// serverQUIC is the endpoint's QUIC configuration, tuned for many idle sessions: an
// agent opens one stream (its session) and no unidirectional ones, the receive windows
// start small (they grow when an agent sends a large inventory), and path MTU discovery
// is off (the agent plane's messages are small; 1,280-byte packets carry them). A
// connection that hears nothing for idle is closed.
func serverQUIC(idle time.Duration) *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:           10 * time.Second,
		MaxIdleTimeout:                 idle,
		InitialStreamReceiveWindow:     16 << 10,
		MaxStreamReceiveWindow:         1 << 20,
		InitialConnectionReceiveWindow: 32 << 10,
		MaxConnectionReceiveWindow:     2 << 20,
		MaxIncomingStreams:             1,
		MaxIncomingUniStreams:          -1,
		DisablePathMTUDiscovery:        true,
	}
}

// serverTLS is the endpoint's TLS configuration: TLS 1.3, the agent ALPN, a client
// certificate from an agent CA that names a node and a role, and X25519 (one key
// exchange, cheap, on every handshake).
//
// An agent that reconnects resumes its last session with a ticket: no certificate is
// signed or verified again, which spares about a third of its CPU in a reconnect storm.
// The ticket carries the agent's verified certificate; resuming checks that it is
// unexpired and still chains to the agent CAs, and VerifyConnection checks its identity
// as for a full handshake. The ticket key comes from the store, so a restarted registry
// resumes the last one's sessions; whoever holds it could forge a ticket, as whoever
// holds the agent CA key could forge a certificate: both stay in the data directory.
func serverTLS(cfg Config, ticketKey [32]byte) *tls.Config {
	conf := &tls.Config{
		MinVersion:       tls.VersionTLS13,
		GetCertificate:   cfg.GetCertificate,
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        cfg.AgentCAs,
		NextProtos:       []string{proto.AgentALPN},
		CurvePreferences: []tls.CurveID{tls.X25519},
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := identify(cs)
			return err
		},
	}
	if cfg.GetCertificate == nil { // crypto/tls asks GetCertificate only without Certificates
		conf.Certificates = []tls.Certificate{cfg.Certificate}
	}
	conf.SetSessionTicketKeys([][32]byte{ticketKey})
	return conf
}

// identity is who an agent is, as its verified certificate names it.
type identity struct {
	node string
	role proto.Role
}

// identify reads the node id (CommonName), the role (the one OrganizationalUnit), the
// identity epoch (proto.IdentityEpoch) and the workflow run (proto.AgentRun) from a
// verified client certificate.
func identify(cs tls.ConnectionState) (proto.AgentCredential, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return proto.AgentCredential{}, proto.Errorf(proto.Unauthenticated, "agent presented no verified certificate")
	}
	leaf := cs.PeerCertificates[0]
	if err := proto.CheckNodeID(leaf.Subject.CommonName); err != nil {
		return proto.AgentCredential{}, proto.Errorf(proto.Unauthenticated, "agent certificate: %v", err)
	}
	ou := leaf.Subject.OrganizationalUnit
	if len(ou) != 1 || !proto.Role(ou[0]).Valid() {
		return proto.AgentCredential{}, proto.Errorf(proto.Unauthenticated, "agent certificate of %q names the roles %q: it must name one of site, ramdisk, node", leaf.Subject.CommonName, ou)
	}
	epoch, err := proto.IdentityEpoch(leaf)
	return proto.AgentCredential{Node: leaf.Subject.CommonName, Role: proto.Role(ou[0]), Epoch: epoch, Run: proto.AgentRun(leaf)}, err
}
