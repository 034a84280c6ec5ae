package join

import (
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto/joinwire"
)

// fixture is a registry's key material made in memory: enough to build well-known
// documents and JoinResponses the way the registry does.
type fixture struct {
	caKey      *ecdsa.PrivateKey
	ca         *x509.Certificate
	leaf       *x509.Certificate
	signing    ed25519.PrivateKey
	enc        *ecdh.PrivateKey
	agentCAKey *ecdsa.PrivateKey
	agentCA    *x509.Certificate
	pins       joinwire.Pins
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{}
	f.caKey, f.ca = makeCA(t, "serving CA")
	f.agentCAKey, f.agentCA = makeCA(t, "agent CA")
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f.leaf = issue(t, f.ca, f.caKey, leafKey.Public(), &x509.Certificate{
		Subject: pkix.Name{CommonName: "registry"}, DNSNames: []string{"registry.test"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	f.signing = ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	f.enc, _ = ecdh.X25519().GenerateKey(rand.Reader)
	f.pins.ServingCA, _ = joinwire.Pin(f.ca.PublicKey)
	f.pins.JoinSigning, _ = joinwire.Pin(f.signing.Public())
	f.pins.JoinEncryption, _ = joinwire.Pin(f.enc.PublicKey())
	return f
}

func (f *fixture) document(t testing.TB) joinwire.WellKnown {
	signing, err := joinwire.SigningKeyPEM(f.signing.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	return joinwire.WellKnown{Version: 1, ServingCA: pemCert(f.ca), JoinSigningKey: signing,
		JoinEncryptionKey: joinwire.NewJWK(f.enc.PublicKey()), AgentEndpoint: "registry.test:7444",
		AgentEndpoints: []string{"registry.test:7444", "registry-2.test:7444"}}
}

// response is what the registry answers a join of nodeID/role for pub, signed by signer.
func (f *fixture) response(t testing.TB, signer crypto.Signer, nodeID, role string, pub crypto.PublicKey) []byte {
	cert := issue(t, f.agentCA, f.agentCAKey, pub, &x509.Certificate{
		Subject:     pkix.Name{CommonName: nodeID, OrganizationalUnit: []string{role}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	resp, err := joinwire.SignResponse(signer, joinwire.Payload{NodeID: nodeID, Role: role, Certificate: pemCert(cert), AgentCA: pemCert(f.agentCA), AgentEndpoint: "registry.test:7444"})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(resp)
	return data
}

func makeCA(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	return key, issue(t, nil, key, key.Public(), tmpl)
}

// issue signs tmpl for pub with parent (self-signed when parent is nil).
func issue(t testing.TB, parent *x509.Certificate, parentKey crypto.Signer, pub crypto.PublicKey, tmpl *x509.Certificate) *x509.Certificate {
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	if !tmpl.IsCA {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	}
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert
}

func pemCert(c *x509.Certificate) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
}
