package session

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// newTestAgent makes the session of agent nd_1 in role with cfg, its certificate from a
// new agent CA, its registry at an address where nothing listens.
func newTestAgent(t *testing.T, role string, cfg Config) *Agent {
	t.Helper()
	ca, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Certificate, err = ca.AgentCertificate("nd_1", role); err != nil {
		t.Fatal(err)
	}
	cfg.Addr, cfg.Log = "127.0.0.1:1", slog.New(slog.DiscardHandler)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestSignResult checks that a handler's signed result names the agent's node and the
// command it runs, verifies with the key of the certificate it carries, and that
// nothing is signed outside a command.
func TestSignResult(t *testing.T) {
	a := newTestAgent(t, "ramdisk", Config{})
	if _, err := SignResult(t.Context(), proto.CommandDiskWipe, map[string]any{}); err == nil {
		t.Fatal("signed outside a command")
	}
	ctx := context.WithValue(context.WithValue(t.Context(), agentKey{}, a), cmdKey{}, &run{id: "wf_1.3.1"})
	raw, err := SignResult(ctx, proto.CommandDiskWipe, map[string]any{"disks": []string{}})
	if err != nil {
		t.Fatal(err)
	}
	var sr proto.SignedResult
	if err := json.Unmarshal(raw, &sr); err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(sr.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	// Checked as an auditor checks it, with the certificate alone (the registry's
	// verifier, registry/attest, has its own tests).
	alg := map[string]x509.SignatureAlgorithm{proto.SigEd25519: x509.PureEd25519, proto.SigECDSAP256: x509.ECDSAWithSHA256}[sr.Algorithm]
	if err := leaf.CheckSignature(alg, proto.SignedMessage(sr.Payload), sr.Signature); err != nil {
		t.Fatalf("%s signature: %v", sr.Algorithm, err)
	}
	var p proto.ResultPayload
	if err := json.Unmarshal(sr.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Version != proto.ResultPayloadVersion || p.NodeID != "nd_1" || p.CommandID != "wf_1.3.1" || p.Kind != proto.CommandDiskWipe || string(p.Result) != `{"disks":[]}` {
		t.Errorf("payload %+v", p)
	}
}
