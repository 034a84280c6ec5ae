package testkit

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"time"
)

// CA is a certificate authority made for a test: it issues the registry's server
// certificate and agents' client certificates the way the registry's PKI does (an agent's
// CommonName is its node id, its one OrganizationalUnit its role). Its methods return
// errors rather than take a testing.TB, so that child processes of a test (load agents)
// can use it too.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a fresh CA.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return &CA{cert: cert, key: key}, err
}

// PEM returns the CA's certificate and key, for LoadCA in another process.
func (ca *CA) PEM() (certPEM, keyPEM []byte, err error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// LoadCA reads a CA that PEM wrote.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("test CA key is not ECDSA")
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	return &CA{cert: cert, key: key}, err
}

// Pool is a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Certificate is the CA's own certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// IssueAgent issues an agent certificate (DER) naming node and role for the public key
// pub, as the registry's agent CA does at a join or a renewal.
func (ca *CA) IssueAgent(node, role string, pub crypto.PublicKey) ([]byte, error) {
	return ca.sign(agentTemplate(node, role), pub)
}

// ExpiringAgentCertificate is an agent certificate of node and role with ten minutes left
// of its seventy: one an agent renews at once.
func (ca *CA) ExpiringAgentCertificate(node, role string) (tls.Certificate, error) {
	tmpl := agentTemplate(node, role)
	tmpl.NotAfter = time.Now().Add(10 * time.Minute)
	return ca.issue(tmpl)
}

func agentTemplate(node string, ou ...string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: node, OrganizationalUnit: ou},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// ServerCertificate issues a server certificate for 127.0.0.1 and localhost.
func (ca *CA) ServerCertificate() (tls.Certificate, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "registry"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// AgentCertificate issues an agent's client certificate naming node and the given
// organizational units (exactly one role, for a well-formed one).
func (ca *CA) AgentCertificate(node string, ou ...string) (tls.Certificate, error) {
	return ca.issue(agentTemplate(node, ou...))
}

// issue makes a key and a certificate of tmpl for it.
func (ca *CA) issue(tmpl *x509.Certificate) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	der, err := ca.sign(tmpl, key.Public())
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// sign certifies pub with tmpl, valid from an hour ago for a day unless tmpl says when
// it ends.
func (ca *CA) sign(tmpl *x509.Certificate, pub crypto.PublicKey) ([]byte, error) {
	tmpl.SerialNumber, _ = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	return x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
}
