package joinwire

import (
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/better-compute/better-compute/proto"
)

// Payload is what a JoinResponse vouches for.
type Payload struct {
	// Version is 1.
	Version int `json:"version"`
	// NodeID and Role are the identity the certificate names.
	NodeID string `json:"nodeId"`
	Role   string `json:"role"`
	// Site is the site the token was minted for, if any.
	Site string `json:"site,omitempty"`
	// Certificate is the agent's PEM certificate, issued by the agent CA.
	Certificate string `json:"certificate"`
	// AgentCA is the PEM certificate of the agent CA.
	AgentCA string `json:"agentCa"`
	// AgentEndpoint is the agents' QUIC endpoint, host:port on UDP.
	AgentEndpoint string `json:"agentEndpoint,omitempty"`
	// AgentEndpoints are the agent endpoints of every replica of the registry, as the
	// well-known document lists them.
	AgentEndpoints []string `json:"agentEndpoints,omitempty"`
}

// Response is the answer of join.join: a payload and the signature of the JoinResponse
// signing key over its exact bytes.
type Response struct {
	// Payload is the standard base64 of the payload's JSON, exactly the bytes signed.
	Payload string `json:"payload"`
	// Signature is the standard base64 of the Ed25519 signature over
	// SignedBytes(payload bytes).
	Signature string `json:"signature"`
}

// responseContext starts the signed bytes, so the signing key's signatures over
// JoinResponses can never pass for anything else.
const responseContext = "bc-join-response-v1\n"

// SignedBytes are the canonical bytes a JoinResponse signature covers: the text
// "bc-join-response-v1", a newline, then the payload's JSON exactly as carried (after
// base64 decoding). Nothing is re-encoded on either side, so there is one spelling.
func SignedBytes(payload []byte) []byte {
	return append([]byte(responseContext), payload...)
}

// SignResponse signs p with the JoinResponse signing key.
func SignResponse(signer crypto.Signer, p Payload) (Response, error) {
	p.Version = Version
	payload, err := proto.Marshal(p)
	if err != nil {
		return Response{}, err
	}
	sig, err := signer.Sign(nil, SignedBytes(payload), crypto.Hash(0))
	if err != nil {
		return Response{}, err
	}
	return Response{
		Payload:   base64.StdEncoding.EncodeToString(payload),
		Signature: base64.StdEncoding.EncodeToString(sig),
	}, nil
}

// ErrSignature is returned by VerifyResponse when the signature does not verify.
var ErrSignature = errors.New("the JoinResponse signature does not verify with the pinned join signing key")

// VerifyResponse checks a JoinResponse's signature with the pinned signing key and
// decodes its payload. Nothing of the payload is read before the signature verifies.
func VerifyResponse(pub ed25519.PublicKey, r Response) (Payload, error) {
	payload, err := base64.StdEncoding.DecodeString(r.Payload)
	if err != nil {
		return Payload{}, fmt.Errorf("JoinResponse payload: %v", err)
	}
	sig, err := base64.StdEncoding.DecodeString(r.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return Payload{}, ErrSignature
	}
	if !ed25519.Verify(pub, SignedBytes(payload), sig) {
		return Payload{}, ErrSignature
	}
	var p Payload
	if err := json.Unmarshal(payload, &p); err != nil {
		return Payload{}, fmt.Errorf("JoinResponse payload: %v", err)
	}
	if p.Version != Version {
		return Payload{}, fmt.Errorf("JoinResponse payload version %d; this bcd reads version %d", p.Version, Version)
	}
	return p, nil
}
