package agentplane

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/attest"
)

// TestSignedDCGMResults runs diag.dcgm through the real agent plane with a node agent
// that answers as an attacker would, holding a run in which GPU 1 failed: the registry
// fails the step with DRIVER_ERROR for the honest answer (naming the test and GPU), and
// for a tampered result that claims a pass, one signed by another node's key, a passing
// run replayed from another workflow step, and an unsigned pass.
func TestSignedDCGMResults(t *testing.T) {
	e, other := signingEnv(t)
	run := func(gpu1 string) proto.DCGMResult {
		return proto.DCGMResult{Level: 1, Tests: []proto.DCGMTest{{Category: "Hardware", Name: "memory", Status: gpu1,
			Results: []proto.DCGMEntityResult{{Entity: "GPU", ID: 0, Status: proto.DCGMPass}, {Entity: "GPU", ID: 1, Status: gpu1}}}}}
	}
	failed, passed := run(proto.DCGMFail), run(proto.DCGMPass)
	var mu sync.Mutex
	var earlier json.RawMessage // an honest passing answer to an earlier step
	e.startAgent("node-1", func(c *session.Config) {
		c.Handlers = map[string]session.Handler{proto.CommandDiagDCGM: func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
			var in struct{ Attack string }
			json.Unmarshal(p, &in)
			switch in.Attack {
			case "earlier":
				out, err := session.SignResult(ctx, proto.CommandDiagDCGM, passed)
				mu.Lock()
				earlier = out
				mu.Unlock()
				return out, err
			case "replay":
				mu.Lock()
				defer mu.Unlock()
				return earlier, nil
			case "claim":
				return json.Marshal(passed)
			case "other-key":
				return signedBy(other, commandOf(p), proto.CommandDiagDCGM, passed)
			}
			out, err := session.SignResult(ctx, proto.CommandDiagDCGM, failed)
			if in.Attack == "tamper" {
				var sr proto.SignedResult
				json.Unmarshal(out, &sr)
				sr.Payload = []byte(strings.ReplaceAll(string(sr.Payload), `"fail"`, `"pass"`))
				out, _ = json.Marshal(sr)
			}
			return out, err
		}}
	})
	waitFor(t, "session", func() bool { return e.ep.Sessions() == 1 })

	relay := func(id, attack string) (json.RawMessage, *proto.Error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		payload, _ := json.Marshal(map[string]any{"level": 1, "attack": attack, "id": id})
		out, err := e.ep.Relay(ctx, "node-1", proto.RoleNode, proto.Command{ID: id, Kind: proto.CommandDiagDCGM, Payload: payload})
		if err != nil {
			return nil, proto.AsError(err)
		}
		return out, nil
	}
	if out, err := relay("wf_1:acceptance.0:a1", "earlier"); err != nil || !strings.Contains(string(out), `"passed":true`) {
		t.Fatalf("the honest passing run: %s %v", out, err)
	}
	_, failure := relay("wf_2:acceptance.0:a1", "")
	if err := failure; err == nil || err.Code != proto.DriverError || err.Details.Reason != "tests-failed" || !strings.Contains(err.Message, "memory (GPU 1)") {
		t.Errorf("the honest failing run: %v", err)
	}
	for attack, says := range map[string]string{"tamper": "does not verify", "other-key": "node-2", "replay": "another step", "claim": "not signed"} {
		out, err := relay("wf_2:acceptance.0:a1-"+attack, attack)
		if err == nil || err.Code != proto.DriverError || err.Details.Reason != "signature" || !strings.Contains(err.Message, says) {
			t.Errorf("%s: stored %s, %v; want DRIVER_ERROR (signature: %s)", attack, out, err, says)
		}
	}
}

// signedBy is result as node-1's answer to the command, signed with the key and
// certificate of another node: what an attacking node-1 holding node-2's key sends.
func signedBy(other tls.Certificate, commandID, kind string, result any) (json.RawMessage, error) {
	body, err := json.Marshal(result)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(other.Certificate[0])
	if err != nil {
		return nil, err
	}
	sr, err := proto.SignResult(other.PrivateKey.(crypto.Signer), proto.ResultPayload{NodeID: "node-1", CommandID: commandID, Kind: kind, Result: body})
	if err != nil {
		return nil, err
	}
	sr.Certificate = leaf.Raw
	return json.Marshal(sr)
}

// signingEnv is an agent endpoint that reads node-signed results as serve does
// (attest.Verifier with its agent CA), and a certificate and key of node-2 an attacking
// node-1 signs with.
func signingEnv(t *testing.T) (*env, tls.Certificate) {
	var v attest.Verifier
	var vmu sync.Mutex
	e := newEnv(t, agents.Config{Received: func(node string, role proto.Role, peer *x509.Certificate, cmd proto.Command, sent time.Time, res proto.Result) proto.Result {
		vmu.Lock()
		defer vmu.Unlock()
		return v.Received(node, role, peer, cmd, sent, res)
	}})
	vmu.Lock()
	v.AgentCAs = e.ca.Pool()
	vmu.Unlock()
	other, err := e.ca.AgentCertificate("node-2", string(proto.RoleNode))
	if err != nil {
		t.Fatal(err)
	}
	return e, other
}
