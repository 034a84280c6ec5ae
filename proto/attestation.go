package proto

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"
)

// A node-signed result (docs/agent-plane.md#node-signed-results) is a relayed command's
// result signed by the agent's own key, the one its agent-CA certificate certifies, so
// that the registry, and later an auditor with nothing but openssl, can tell that this
// machine produced it for this one command.

// ResultDomain prefixes the payload in the signed message: the signature is over
// ResultDomain followed by SignedResult.Payload exactly as carried, so no other signature
// an agent key makes can pass for a result.
const ResultDomain = "bc-result-v1\n"

// ResultPayloadVersion is the version of ResultPayload this release signs and accepts.
const ResultPayloadVersion = 1

// The signature algorithms of a SignedResult, one per kind of agent key.
const (
	// SigECDSAP256 is ECDSA on P-256 over the SHA-256 of the message, the signature in
	// ASN.1 DER (what `openssl dgst -sha256 -verify` checks).
	SigECDSAP256 = "ecdsa-p256-sha256"
	// SigEd25519 is Ed25519 over the message itself, the 64-byte signature raw (what
	// `openssl pkeyutl -verify -rawin` checks).
	SigEd25519 = "ed25519"
)

// MaxResultPayload bounds the payload a registry reads (the frame bounds it anyway).
const MaxResultPayload = 4 << 20

// ResultPayload is what an agent signs.
type ResultPayload struct {
	// Version is ResultPayloadVersion.
	Version int `json:"version"`
	// NodeID is the node the agent's certificate names.
	NodeID string `json:"nodeId"`
	// CommandID is the id of the relayed command this answers: one attempt of one
	// workflow step, so a result cannot be replayed for another step or attempt.
	CommandID string `json:"commandId"`
	// Kind is the command's kind (disk.wipe, diag.dcgm).
	Kind string `json:"kind"`
	// Time is when the agent signed, UTC.
	Time time.Time `json:"time"`
	// Result is the command's result, its kind's JSON.
	Result json.RawMessage `json:"result"`
}

// SignedResult is a node-signed result as the agent answers it, and as the registry
// stores it with its step.
type SignedResult struct {
	// Payload is the JSON of a ResultPayload, the bytes signed (base64 in JSON).
	Payload []byte `json:"payload"`
	// Algorithm is SigECDSAP256 or SigEd25519.
	Algorithm string `json:"algorithm"`
	// Signature is over ResultDomain + Payload (base64 in JSON).
	Signature []byte `json:"signature"`
	// Certificate is the DER of the agent certificate whose key signed.
	Certificate []byte `json:"certificate,omitempty"`
}

// ResultWant is what a verifier expects a payload to say.
type ResultWant struct {
	NodeID, CommandID, Kind string
}

// SignedMessage is what a SignedResult's signature covers: ResultDomain, then payload.
func SignedMessage(payload []byte) []byte {
	return append([]byte(ResultDomain), payload...)
}

// SignResult signs p with signer, an ECDSA P-256 or Ed25519 key. A zero Version is
// ResultPayloadVersion; a zero Time is now.
func SignResult(signer crypto.Signer, p ResultPayload) (SignedResult, error) {
	if p.Version == 0 {
		p.Version = ResultPayloadVersion
	}
	if p.Time.IsZero() {
		p.Time = time.Now()
	}
	p.Time = p.Time.UTC()
	payload, err := Marshal(p)
	if err != nil {
		return SignedResult{}, fmt.Errorf("signed result: %w", err)
	}
	msg := SignedMessage(payload)
	var alg string
	var sig []byte
	switch pub := signer.Public().(type) {
	case ed25519.PublicKey:
		alg = SigEd25519
		sig, err = signer.Sign(rand.Reader, msg, crypto.Hash(0))
	case *ecdsa.PublicKey:
		if pub.Curve != elliptic.P256() {
			return SignedResult{}, fmt.Errorf("signed result: an ECDSA agent key is on P-256, not %s", pub.Curve.Params().Name)
		}
		alg = SigECDSAP256
		digest := sha256.Sum256(msg)
		sig, err = signer.Sign(rand.Reader, digest[:], crypto.SHA256)
	default:
		return SignedResult{}, fmt.Errorf("signed result: an agent key is ECDSA P-256 or Ed25519, not %s", KeyAlgorithm(pub))
	}
	if err != nil {
		return SignedResult{}, fmt.Errorf("signed result: %w", err)
	}
	return SignedResult{Payload: payload, Algorithm: alg, Signature: sig}, nil
}
