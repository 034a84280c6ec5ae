package agentplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/testkit"
)

// TestCertificateRenewal gives an agent a certificate with ten minutes left: KeepRenewed
// renews it over the session at once, from another CA than its first, and saves it; then
// the registry restarts trusting only that CA, and the agent comes back, so its next
// connection presented the renewed certificate.
func TestCertificateRenewal(t *testing.T) {
	next, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, agents.Config{Renew: func(c proto.AgentCredential, spki []byte) ([]byte, error) {
		pub, err := joinwire.ParseAgentKey(spki)
		if err != nil {
			return nil, proto.Errorf(proto.InvalidInput, "%v", err)
		}
		return next.IssueAgent(c.Node, string(c.Role), pub)
	}})
	e.setSpec("gpu-1", nil)
	expiring, err := e.ca.ExpiringAgentCertificate("gpu-1", string(proto.RoleNode))
	if err != nil {
		t.Fatal(err)
	}
	a := e.startAgent("gpu-1", func(c *session.Config) { c.Certificate = expiring })
	saved := make(chan tls.Certificate, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.KeepRenewed(ctx, func(_, c tls.Certificate) error { saved <- c; return nil }); close(done) }()
	defer func() { cancel(); <-done }()

	var cert tls.Certificate
	select {
	case cert = <-saved:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewed certificate saved")
	}
	key, _ := cert.PrivateKey.(*ecdsa.PrivateKey)
	if cert.Leaf.Subject.CommonName != "gpu-1" || cert.Leaf.CheckSignatureFrom(next.Certificate()) != nil || key == nil || !key.PublicKey.Equal(cert.Leaf.PublicKey) {
		t.Fatalf("renewed certificate: %v for %v", cert.Leaf.Subject, cert.Leaf.PublicKey)
	}

	e.stop()
	e.hooks.AgentCAs = next.Pool()
	e.start()
	waitFor(t, "the agent back with its renewed certificate", func() bool { return e.ep.Sessions() == 1 })
}

// TestRenewalRefused: a registry without renewal answers UNSUPPORTED, and the agent
// keeps its certificate.
func TestRenewalRefused(t *testing.T) {
	e := newEnv(t, agents.Config{})
	a := e.startAgent("gpu-1", nil)
	waitFor(t, "the session", func() bool { return e.ep.Sessions() == 1 })
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Renew(t.Context(), key); proto.CodeOf(err) != proto.Unsupported {
		t.Fatalf("got %v, want UNSUPPORTED", err)
	}
	e.stop()
	e.start()
	waitFor(t, "the agent back with its first certificate", func() bool { return e.ep.Sessions() == 1 })
}
