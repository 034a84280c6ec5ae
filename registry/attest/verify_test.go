package attest_test

import (
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/attest"

	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func agentKeys(t *testing.T) map[string]crypto.Signer {
	t.Helper()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]crypto.Signer{proto.SigECDSAP256: ec, proto.SigEd25519: ed}
}

var wantResult = attest.ResultWant{NodeID: "node-1", CommandID: "wf-1.s3.a1", Kind: proto.CommandDiskWipe}

func signed(t *testing.T, k crypto.Signer, w attest.ResultWant) proto.SignedResult {
	t.Helper()
	sr, err := proto.SignResult(k, proto.ResultPayload{NodeID: w.NodeID, CommandID: w.CommandID, Kind: w.Kind,
		Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Result: json.RawMessage(`{"disks":[]}`)})
	if err != nil {
		t.Fatal(err)
	}
	return sr
}

func TestSignedResultVerifies(t *testing.T) {
	for alg, k := range agentKeys(t) {
		sr := signed(t, k, wantResult)
		if sr.Algorithm != alg {
			t.Errorf("algorithm %q, want %q", sr.Algorithm, alg)
		}
		p, err := attest.VerifyResult(k.Public(), sr, wantResult)
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if p.Version != proto.ResultPayloadVersion || p.NodeID != wantResult.NodeID || string(p.Result) != `{"disks":[]}` {
			t.Errorf("%s: payload %+v", alg, p)
		}
	}
}

// TestSignedResultRefusals are what an attacker tries: change a byte of the payload,
// sign with another node's key, present a result of another step (command id), of
// another node or kind, or claim another algorithm.
func TestSignedResultRefusals(t *testing.T) {
	keys, others := agentKeys(t), agentKeys(t)
	for alg, k := range keys {
		good := signed(t, k, wantResult)
		tampered := good
		tampered.Payload = []byte(strings.Replace(string(good.Payload), `"disks":[]`, `"disks":[ ]`, 1))
		other := signed(t, others[alg], wantResult)
		otherAlg := good
		otherAlg.Algorithm = map[string]string{proto.SigEd25519: proto.SigECDSAP256, proto.SigECDSAP256: proto.SigEd25519}[alg]
		cases := []struct {
			name   string
			sr     proto.SignedResult
			w      attest.ResultWant
			reason string
		}{
			{"tampered payload", tampered, wantResult, "signature"},
			{"other node's key", other, wantResult, "signature"},
			{"replayed from another step", good, attest.ResultWant{wantResult.NodeID, "wf-1.s5.a1", wantResult.Kind}, "command"},
			{"another node", good, attest.ResultWant{"node-2", wantResult.CommandID, wantResult.Kind}, "node"},
			{"another kind", good, attest.ResultWant{wantResult.NodeID, wantResult.CommandID, proto.CommandDiagDCGM}, "kind"},
			{"another algorithm", otherAlg, wantResult, "algorithm"},
			{"no signature", proto.SignedResult{Payload: good.Payload, Algorithm: alg}, wantResult, "signature"},
		}
		for _, c := range cases {
			_, err := attest.VerifyResult(k.Public(), c.sr, c.w)
			e, ok := err.(*proto.Error)
			if !ok || e.Code != proto.Forbidden || e.Details.Reason != c.reason {
				t.Errorf("%s %s: %v, want FORBIDDEN (%s)", alg, c.name, err, c.reason)
			}
		}
	}
}

// TestSignedResultPayloadChecks: a payload signed by the right key is still refused
// when it is not a version-1 result payload, read strictly (a key twice, which
// encoding/json took the last of, is refused like an unknown field).
func TestSignedResultPayloadChecks(t *testing.T) {
	k := agentKeys(t)[proto.SigEd25519]
	for name, payload := range map[string]string{
		"version 2":      `{"version":2,"nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z","result":{}}`,
		"unknown field":  `{"version":1,"nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z","result":{},"attested":true}`,
		"no result":      `{"version":1,"nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z"}`,
		"trailing bytes": `{"version":1,"nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z","result":{}} {}`,
		"not JSON":       `version 1`,
		"duplicate key":  `{"version":1,"nodeId":"node-2","nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z","result":{}}`,
	} {
		sig, err := k.Sign(rand.Reader, proto.SignedMessage([]byte(payload)), crypto.Hash(0))
		if err != nil {
			t.Fatal(err)
		}
		_, err = attest.VerifyResult(k.Public(), proto.SignedResult{Payload: []byte(payload), Algorithm: proto.SigEd25519, Signature: sig}, wantResult)
		if proto.CodeOf(err) != proto.Forbidden {
			t.Errorf("%s: %v, want FORBIDDEN", name, err)
		}
	}
}

func FuzzVerifyResult(f *testing.F) {
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	good, _ := proto.SignResult(k, proto.ResultPayload{NodeID: wantResult.NodeID, CommandID: wantResult.CommandID, Kind: wantResult.Kind, Result: json.RawMessage(`{}`)})
	f.Add(good.Payload, good.Signature)
	f.Add([]byte(`{}`), []byte{})
	f.Fuzz(func(t *testing.T, payload, sig []byte) {
		p, err := attest.VerifyResult(k.Public(), proto.SignedResult{Payload: payload, Algorithm: proto.SigEd25519, Signature: sig}, wantResult)
		if err == nil && (p.CommandID != wantResult.CommandID || p.NodeID != wantResult.NodeID) {
			t.Fatalf("accepted %+v", p)
		}
	})
}
