package proto

import (
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
	return map[string]crypto.Signer{SigECDSAP256: ec, SigEd25519: ed}
}

var want = ResultWant{NodeID: "node-1", CommandID: "wf-1.s3.a1", Kind: CommandDiskWipe}

func signed(t *testing.T, k crypto.Signer, w ResultWant) SignedResult {
	t.Helper()
	sr, err := SignResult(k, ResultPayload{NodeID: w.NodeID, CommandID: w.CommandID, Kind: w.Kind,
		Time: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Result: json.RawMessage(`{"disks":[]}`)})
	if err != nil {
		t.Fatal(err)
	}
	return sr
}

func TestSignedResultVerifies(t *testing.T) {
	for alg, k := range agentKeys(t) {
		sr := signed(t, k, want)
		if sr.Algorithm != alg {
			t.Errorf("algorithm %q, want %q", sr.Algorithm, alg)
		}
		p, err := VerifyResult(k.Public(), sr, want)
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if p.Version != ResultPayloadVersion || p.NodeID != want.NodeID || string(p.Result) != `{"disks":[]}` {
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
		good := signed(t, k, want)
		tampered := good
		tampered.Payload = []byte(strings.Replace(string(good.Payload), `"disks":[]`, `"disks":[ ]`, 1))
		other := signed(t, others[alg], want)
		otherAlg := good
		otherAlg.Algorithm = map[string]string{SigEd25519: SigECDSAP256, SigECDSAP256: SigEd25519}[alg]
		cases := []struct {
			name   string
			sr     SignedResult
			w      ResultWant
			reason string
		}{
			{"tampered payload", tampered, want, "signature"},
			{"other node's key", other, want, "signature"},
			{"replayed from another step", good, ResultWant{want.NodeID, "wf-1.s5.a1", want.Kind}, "command"},
			{"another node", good, ResultWant{"node-2", want.CommandID, want.Kind}, "node"},
			{"another kind", good, ResultWant{want.NodeID, want.CommandID, CommandDiagDCGM}, "kind"},
			{"another algorithm", otherAlg, want, "algorithm"},
			{"no signature", SignedResult{Payload: good.Payload, Algorithm: alg}, want, "signature"},
		}
		for _, c := range cases {
			_, err := VerifyResult(k.Public(), c.sr, c.w)
			e, ok := err.(*Error)
			if !ok || e.Code != Forbidden || e.Details.Reason != c.reason {
				t.Errorf("%s %s: %v, want FORBIDDEN (%s)", alg, c.name, err, c.reason)
			}
		}
	}
}

// TestSignedResultPayloadChecks: a payload signed by the right key is still refused
// when it is not a version-1 result payload.
func TestSignedResultPayloadChecks(t *testing.T) {
	k := agentKeys(t)[SigEd25519]
	for name, payload := range map[string]string{
		"version 2":      `{"version":2,"nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z","result":{}}`,
		"unknown field":  `{"version":1,"nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z","result":{},"attested":true}`,
		"no result":      `{"version":1,"nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z"}`,
		"trailing bytes": `{"version":1,"nodeId":"node-1","commandId":"wf-1.s3.a1","kind":"disk.wipe","time":"2026-12-01T10:00:00Z","result":{}} {}`,
		"not JSON":       `version 1`,
	} {
		sig, err := k.Sign(rand.Reader, SignedMessage([]byte(payload)), crypto.Hash(0))
		if err != nil {
			t.Fatal(err)
		}
		_, err = VerifyResult(k.Public(), SignedResult{Payload: []byte(payload), Algorithm: SigEd25519, Signature: sig}, want)
		if CodeOf(err) != Forbidden {
			t.Errorf("%s: %v, want FORBIDDEN", name, err)
		}
	}
}

func FuzzVerifyResult(f *testing.F) {
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	good, _ := SignResult(k, ResultPayload{NodeID: want.NodeID, CommandID: want.CommandID, Kind: want.Kind, Result: json.RawMessage(`{}`)})
	f.Add(good.Payload, good.Signature)
	f.Add([]byte(`{}`), []byte{})
	f.Fuzz(func(t *testing.T, payload, sig []byte) {
		p, err := VerifyResult(k.Public(), SignedResult{Payload: payload, Algorithm: SigEd25519, Signature: sig}, want)
		if err == nil && (p.CommandID != want.CommandID || p.NodeID != want.NodeID) {
			t.Fatalf("accepted %+v", p)
		}
	})
}
