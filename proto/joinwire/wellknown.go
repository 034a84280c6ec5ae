package joinwire

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"

	"github.com/better-compute/better-compute/proto"
)

// WellKnownPath is where the registry serves its well-known document, unauthenticated,
// on its HTTPS listener.
const WellKnownPath = "/.well-known/better-compute"

// Version is the version of the well-known document and of the JoinResponse payload.
const Version = 1

// MaxDocument bounds the size of a well-known document or a JoinResponse a client reads.
const MaxDocument = 64 << 10

// WellKnown is the registry's well-known document: what a joining agent needs to find
// and trust it. Nothing in it is trusted until it matches the agent's pins.
type WellKnown struct {
	// Version is 1.
	Version int `json:"version"`
	// ServingCA is the PEM certificate of the CA that signs the registry's HTTPS and QUIC
	// server certificates.
	ServingCA string `json:"servingCa"`
	// JoinSigningKey is the PEM SubjectPublicKeyInfo of the Ed25519 key that signs
	// JoinResponses.
	JoinSigningKey string `json:"joinSigningKey"`
	// JoinEncryptionKey is the JoinService's X25519 key that join tokens are sealed to.
	JoinEncryptionKey JWK `json:"joinEncryptionKey"`
	// AgentEndpoint is the agents' QUIC endpoint, host:port on UDP; empty when the
	// registry runs no agent endpoint.
	AgentEndpoint string `json:"agentEndpoint,omitempty"`
	// AgentEndpoints are the agent endpoints of every replica of the registry, host:port
	// on UDP, AgentEndpoint among them; an agent whose replica is gone connects to
	// another. Empty from a registry that advertises only AgentEndpoint.
	AgentEndpoints []string `json:"agentEndpoints,omitempty"`
}

// Anchors are the keys a well-known document carries, decoded.
type Anchors struct {
	ServingCA         *x509.Certificate
	JoinSigningKey    ed25519.PublicKey
	JoinEncryptionKey *ecdh.PublicKey
	AgentEndpoint     string
	AgentEndpoints    []string
}

// ParseWellKnown decodes a well-known document and its keys. Fields it does not know
// are ignored, so a registry can add some without breaking older agents.
func ParseWellKnown(data []byte) (Anchors, error) {
	var doc WellKnown
	if err := json.Unmarshal(data, &doc); err != nil {
		return Anchors{}, fmt.Errorf("well-known document: %v", err)
	}
	if doc.Version != Version {
		return Anchors{}, fmt.Errorf("well-known document version %d; this bcd reads version %d", doc.Version, Version)
	}
	var a Anchors
	var err error
	if a.ServingCA, err = ParseCertificatePEM(doc.ServingCA); err != nil {
		return Anchors{}, fmt.Errorf("well-known document servingCa: %v", err)
	}
	if !a.ServingCA.IsCA {
		return Anchors{}, errors.New("well-known document servingCa is not a CA certificate")
	}
	if a.JoinSigningKey, err = ParseSigningKeyPEM(doc.JoinSigningKey); err != nil {
		return Anchors{}, fmt.Errorf("well-known document joinSigningKey: %v", err)
	}
	if a.JoinEncryptionKey, err = doc.JoinEncryptionKey.PublicKey(); err != nil {
		return Anchors{}, fmt.Errorf("well-known document joinEncryptionKey: %v", err)
	}
	if doc.AgentEndpoint != "" {
		if _, _, err := net.SplitHostPort(doc.AgentEndpoint); err != nil {
			return Anchors{}, fmt.Errorf("well-known document agentEndpoint: %v", err)
		}
	}
	if err := CheckEndpoints(doc.AgentEndpoints); err != nil {
		return Anchors{}, fmt.Errorf("well-known document agentEndpoints%v", err)
	}
	a.AgentEndpoint, a.AgentEndpoints = doc.AgentEndpoint, doc.AgentEndpoints
	return a, nil
}

// MaxEndpoints bounds how many agent endpoints a registry advertises.
const MaxEndpoints = 64

// CheckEndpoints checks a list of agent endpoints, each host:port; an error starts with
// the offending entry's index, [i].
func CheckEndpoints(endpoints []string) error {
	if len(endpoints) > MaxEndpoints {
		return fmt.Errorf(": %d endpoints, at most %d", len(endpoints), MaxEndpoints)
	}
	for i, e := range endpoints {
		host, port, err := net.SplitHostPort(e)
		if err == nil && (host == "" || port == "") {
			err = errors.New("needs a host and a port")
		}
		if err != nil {
			return fmt.Errorf("[%d]: %q: %v", i, e, err)
		}
	}
	return nil
}

// SigningKeyPEM is the PEM SubjectPublicKeyInfo of a JoinResponse signing key.
func SigningKeyPEM(pub ed25519.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), nil
}

// ParseSigningKeyPEM reads a PEM SubjectPublicKeyInfo that must hold an Ed25519 key.
func ParseSigningKeyPEM(s string) (ed25519.PublicKey, error) {
	block, rest := pem.Decode([]byte(s))
	if block == nil || block.Type != "PUBLIC KEY" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("not one PEM PUBLIC KEY block")
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	key, ok := pub.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("an %s key; the join signing key is Ed25519", proto.KeyAlgorithm(pub))
	}
	return key, nil
}

// ParseCertificatePEM reads exactly one PEM certificate.
func ParseCertificatePEM(s string) (*x509.Certificate, error) {
	block, rest := pem.Decode([]byte(s))
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("not one PEM CERTIFICATE block")
	}
	return x509.ParseCertificate(block.Bytes)
}
