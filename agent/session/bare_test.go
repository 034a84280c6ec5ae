package session

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
	"github.com/quic-go/quic-go"
)

// bareRegistry is a registry's agent endpoint reduced to QUIC and TLS
// (testkit.ListenAgents, admit and qc as it takes them) of a new CA. It returns the
// listener, its UDP socket, and a Config for agent nd_1 that dials it.
func bareRegistry(t *testing.T, admit func(context.Context, *quic.ClientInfo) (context.Context, error), qc *quic.Config) (*quic.Listener, *net.UDPConn, Config) {
	t.Helper()
	ca, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	agentCert, err := ca.AgentCertificate("nd_1", string(proto.RoleNode))
	if err != nil {
		t.Fatal(err)
	}
	ln, udp := testkit.ListenAgents(t, ca, admit, qc)
	return ln, udp, Config{Certificate: agentCert, Addr: udp.LocalAddr().String(), ServerCAs: ca.Pool()}
}

// runAgent runs an agent of cfg until the test ends, and waits for it then.
func runAgent(t *testing.T, cfg Config) *Agent {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

// acceptWithin accepts the next connection ln completes, within 30 s.
func acceptWithin(t *testing.T, ln *quic.Listener) *quic.Conn {
	t.Helper()
	ctx, stop := context.WithTimeout(t.Context(), 30*time.Second)
	defer stop()
	conn, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}
