package agentplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/testkit"
)

// TestCertificateRenewal renews a connected agent's certificate over its session, from
// another CA than its first, and then restarts the registry trusting only that CA: the
// agent comes back, so its next connection presented the renewed certificate.
func TestCertificateRenewal(t *testing.T) {
	next, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, agents.Config{Renew: func(node string, role proto.Role, spki []byte) ([]byte, error) {
		pub, err := joinwire.ParseAgentKey(spki)
		if err != nil {
			return nil, proto.Errorf(proto.InvalidInput, "%v", err)
		}
		return next.IssueAgent(node, string(role), pub)
	}})
	e.setSpec("gpu-1", nil)
	a := e.startAgent("gpu-1", nil)
	waitFor(t, "the session", func() bool { return e.ep.Sessions() == 1 })

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cert, err := a.Renew(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Leaf.Subject.CommonName != "gpu-1" || cert.Leaf.CheckSignatureFrom(next.Certificate()) != nil || !key.PublicKey.Equal(cert.Leaf.PublicKey) {
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
