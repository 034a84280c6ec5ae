package testkit

import (
	"context"
	"crypto/tls"
	"net"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/quic-go/quic-go"
)

// ListenAgents is a registry's agent endpoint reduced to QUIC and TLS, for tests of
// what an agent sends: a listener on loopback with a server certificate of ca, asking
// for agent certificates of it. admit, when not nil, takes or refuses each connection
// attempt at its first packet (quic.Transport.ConnContext), as the endpoint's admission
// does. It returns the listener and its UDP socket, closed when the test ends.
func ListenAgents(t testing.TB, ca *CA, admit func(context.Context, *quic.ClientInfo) (context.Context, error), qc *quic.Config) (*quic.Listener, *net.UDPConn) {
	t.Helper()
	serverCert, err := ca.ServerCertificate()
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp, ConnContext: admit}
	t.Cleanup(func() { tr.Close(); udp.Close() })
	ln, err := tr.Listen(&tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs: ca.Pool(), NextProtos: []string{proto.AgentALPN}, MinVersion: tls.VersionTLS13}, qc)
	if err != nil {
		t.Fatal(err)
	}
	return ln, udp
}
