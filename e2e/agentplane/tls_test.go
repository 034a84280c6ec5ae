package agentplane

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/testkit"
	"github.com/quic-go/quic-go"
)

// TestHandshakeRefusals dials the endpoint with raw QUIC: only a certificate from the
// agent CA that names a valid node id and exactly one role, offered with the agent ALPN,
// gets a connection that lasts.
func TestHandshakeRefusals(t *testing.T) {
	e := newEnv(t, agents.Config{})
	other, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert := func(ca *testkit.CA, node string, ou ...string) []tls.Certificate {
		c, err := ca.AgentCertificate(node, ou...)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	cases := map[string]struct {
		certs    []tls.Certificate
		alpn     string
		accepted bool
	}{
		"agent CA":        {certs: cert(e.ca, "gpu-1", "node"), alpn: proto.AgentALPN, accepted: true},
		"site role":       {certs: cert(e.ca, "rack-7", "site"), alpn: proto.AgentALPN, accepted: true},
		"another CA":      {certs: cert(other, "gpu-1", "node"), alpn: proto.AgentALPN},
		"no certificate":  {alpn: proto.AgentALPN},
		"wrong ALPN":      {certs: cert(e.ca, "gpu-1", "node"), alpn: "h3"},
		"unknown role":    {certs: cert(e.ca, "gpu-1", "admin"), alpn: proto.AgentALPN},
		"two roles":       {certs: cert(e.ca, "gpu-1", "node", "site"), alpn: proto.AgentALPN},
		"bad node id":     {certs: cert(e.ca, "a/b", "node"), alpn: proto.AgentALPN},
		"server cert use": {certs: []tls.Certificate{e.server}, alpn: proto.AgentALPN},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			conf := &tls.Config{Certificates: tc.certs, RootCAs: e.ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{tc.alpn}}
			err := dialRefused(e.addr, conf)
			if accepted := err == nil; accepted != tc.accepted {
				t.Fatalf("accepted %v (%v), want %v", accepted, err, tc.accepted)
			}
		})
	}
}

// TestSessionResumption reconnects an agent: it resumes its session instead of a full
// handshake, also with a restarted registry on the same store.
func TestSessionResumption(t *testing.T) {
	e := newEnv(t, agents.Config{})
	cert, err := e.ca.AgentCertificate("gpu-1", string(proto.RoleNode))
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{
		Certificates:       []tls.Certificate{cert},
		RootCAs:            e.ca.Pool(),
		ServerName:         "127.0.0.1",
		NextProtos:         []string{proto.AgentALPN},
		ClientSessionCache: tls.NewLRUClientSessionCache(1),
	}
	dial := func() bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := quic.DialAddr(ctx, e.addr, conf, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseWithError(0, "")
		time.Sleep(50 * time.Millisecond) // the ticket follows the handshake
		return conn.ConnectionState().TLS.DidResume
	}
	steps := []struct {
		name    string
		restart bool
		resumed bool
	}{
		{"first connection", false, false},
		{"reconnect", false, true},
		{"reconnect to a restarted registry", true, true},
	}
	for _, s := range steps {
		if s.restart {
			e.stop()
			e.start()
		}
		if got := dial(); got != s.resumed {
			t.Errorf("%s: resumed %v, want %v", s.name, got, s.resumed)
		}
	}
}
