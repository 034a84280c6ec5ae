package session

import (
	"context"
	"crypto/tls"
	"net"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
	"github.com/quic-go/quic-go"
)

// bareRegistry is a registry's agent endpoint reduced to QUIC and TLS: a listener on
// loopback with a server certificate of a new CA, asking for agent certificates of it.
// admit, when not nil, takes or refuses each connection attempt at its first packet
// (quic.Transport.ConnContext), as the endpoint's admission does. It returns the
// listener, its UDP socket, and a Config for agent nd_1 that dials it.
func bareRegistry(t *testing.T, admit func(context.Context, *quic.ClientInfo) (context.Context, error), qc *quic.Config) (*quic.Listener, *net.UDPConn, Config) {
	t.Helper()
	ca, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	serverCert, err := ca.ServerCertificate()
	if err != nil {
		t.Fatal(err)
	}
	agentCert, err := ca.AgentCertificate("nd_1", string(proto.RoleNode))
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp, ConnContext: admit}
	t.Cleanup(func() { tr.Close() })
	ln, err := tr.Listen(&tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs: ca.Pool(), NextProtos: []string{proto.AgentALPN}, MinVersion: tls.VersionTLS13}, qc)
	if err != nil {
		t.Fatal(err)
	}
	return ln, udp, Config{Certificate: agentCert, Addr: udp.LocalAddr().String(), ServerCAs: ca.Pool()}
}

// runAgent runs an agent of cfg until the test ends, and waits for it then.
func runAgent(t *testing.T, cfg Config) {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}
