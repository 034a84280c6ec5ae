package join

import (
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"net"
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
)

// acceptResponse verifies a JoinResponse body with the pinned signing key, then checks
// that it certifies exactly this agent: its node id and role, and its own public key,
// in a client certificate that chains to the agent CA it carries.
func acceptResponse(body []byte, signing ed25519.PublicKey, nodeID, role string, pub crypto.PublicKey) (joinwire.Payload, error) {
	bad := func(format string, args ...any) (joinwire.Payload, error) {
		return joinwire.Payload{}, proto.Errorf(proto.Unauthenticated, "JoinResponse: "+format, args...).WithReason(proto.ReasonJoinResponse)
	}
	var r joinwire.Response
	if err := json.Unmarshal(body, &r); err != nil {
		return bad("%v", err)
	}
	p, err := joinwire.VerifyResponse(signing, r)
	if err != nil {
		return bad("%v", err)
	}
	if p.NodeID != nodeID || p.Role != role {
		return bad("it is for node %q role %q, not node %q role %q", p.NodeID, p.Role, nodeID, role)
	}
	if p.AgentEndpoint != "" {
		if _, _, err := net.SplitHostPort(p.AgentEndpoint); err != nil {
			return bad("agentEndpoint: %v", err)
		}
	}
	if err := joinwire.CheckEndpoints(p.AgentEndpoints); err != nil {
		return bad("agentEndpoints%v", err)
	}
	ca, err := joinwire.ParseCertificatePEM(p.AgentCA)
	if err != nil || !ca.IsCA {
		return bad("agentCa is not one CA certificate")
	}
	cert, err := joinwire.ParseCertificatePEM(p.Certificate)
	if err != nil {
		return bad("certificate: %v", err)
	}
	if k, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(pub) {
		return bad("the certificate is not for this agent's key")
	}
	if cert.Subject.CommonName != nodeID || !slices.Equal(cert.Subject.OrganizationalUnit, []string{role}) {
		return bad("the certificate names %q %v, not %q [%s]", cert.Subject.CommonName, cert.Subject.OrganizationalUnit, nodeID, role)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return bad("the certificate does not chain to the agent CA: %v", err)
	}
	return p, nil
}
