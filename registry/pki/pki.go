// Package pki keeps the registry's keys and certificates in the data directory: made on
// first start, loaded on every later one. The serving CA signs the certificate the
// registry presents on HTTPS and QUIC; the CLI trusts that CA through its config file.
// The join keys (the JoinResponse signing key and the JoinService encryption key) and
// the agent CA, which issues the agents' client certificates, live beside it; the pins
// of the three keys an agent checks are written to DATA_DIR/pins.json.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
)

// Dir is the folder of the data directory that holds the PKI.
const Dir = "pki"

// PinsFile is the name of the pins file in the data directory.
const PinsFile = "pins.json"

// PKI is the registry's key material.
type PKI struct {
	ServingCA    *x509.Certificate
	servingCAKey crypto.Signer
	// ServingCAPEM is the serving CA certificate as PEM, for clients to trust.
	ServingCAPEM []byte

	// AgentCA issues the agents' client certificates.
	AgentCA    *x509.Certificate
	agentCAKey crypto.Signer
	// AgentCAPEM is the agent CA certificate as PEM.
	AgentCAPEM []byte

	joinSigning    ed25519.PrivateKey
	joinEncryption *ecdh.PrivateKey
	pins           joinwire.Pins
	// clock stamps what the PKI issues.
	clock Clock
}

// Clock tells the time certificates are stamped with: the registry's clock.Clock.
type Clock interface{ Now() time.Time }

// LoadOrCreate loads the PKI from dataDir, making what is missing, and writes the pins
// to DATA_DIR/pins.json. It first removes what a start killed in the middle of writing a
// file left in DATA_DIR and DATA_DIR/pki (.serving-ca.key.tmp-*, .admin.conf.tmp-*):
// the registry calls it holding the store's lock, so no other registry writes there.
// Every certificate it makes or issues is valid from clk's time.
func LoadOrCreate(dataDir string, clk Clock) (*PKI, error) {
	dir := filepath.Join(dataDir, Dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for _, d := range []string{dataDir, dir} {
		if _, err := fsutil.RemoveTemps(d); err != nil {
			return nil, fmt.Errorf("remove what an interrupted write left in %s: %w", d, err)
		}
	}
	p := &PKI{clock: clk}
	var err error
	if p.ServingCA, p.servingCAKey, p.ServingCAPEM, err = loadOrCreateCA(dir, "serving-ca", "better-compute serving CA", clk.Now()); err != nil {
		return nil, err
	}
	if p.AgentCA, p.agentCAKey, p.AgentCAPEM, err = loadOrCreateCA(dir, "agent-ca", "better-compute agent CA", clk.Now()); err != nil {
		return nil, err
	}
	signing, err := loadOrCreateKey(filepath.Join(dir, "join-signing.key"), func() (any, error) {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	})
	if err != nil {
		return nil, err
	}
	encryption, err := loadOrCreateKey(filepath.Join(dir, "join-encryption.key"), func() (any, error) {
		return ecdh.X25519().GenerateKey(rand.Reader)
	})
	if err != nil {
		return nil, err
	}
	var ok bool
	if p.joinSigning, ok = signing.(ed25519.PrivateKey); !ok {
		return nil, fmt.Errorf("%s: an %s key, not Ed25519", filepath.Join(dir, "join-signing.key"), proto.KeyAlgorithm(signing))
	}
	if p.joinEncryption, ok = encryption.(*ecdh.PrivateKey); !ok || p.joinEncryption.Curve() != ecdh.X25519() {
		return nil, fmt.Errorf("%s: an %s key, not X25519", filepath.Join(dir, "join-encryption.key"), proto.KeyAlgorithm(encryption))
	}
	if err := p.makePins(); err != nil {
		return nil, err
	}
	if err := writePins(filepath.Join(dataDir, PinsFile), p.pins); err != nil {
		return nil, fmt.Errorf("write the pins: %w", err)
	}
	return p, nil
}

func (p *PKI) makePins() (err error) {
	if p.pins.ServingCA, err = joinwire.Pin(p.ServingCA.PublicKey); err != nil {
		return err
	}
	if p.pins.JoinSigning, err = joinwire.Pin(p.joinSigning.Public()); err != nil {
		return err
	}
	p.pins.JoinEncryption, err = joinwire.Pin(p.joinEncryption.PublicKey())
	return err
}

// Pins are the pins of the serving CA, the JoinResponse signing key and the JoinService
// encryption key: what an agent must be given, out of band, to join.
func (p *PKI) Pins() joinwire.Pins { return p.pins }

// JoinSigner signs JoinResponses (Ed25519).
func (p *PKI) JoinSigner() crypto.Signer { return p.joinSigning }

// JoinSigningKey is the public half of the JoinResponse signing key.
func (p *PKI) JoinSigningKey() ed25519.PublicKey { return p.joinSigning.Public().(ed25519.PublicKey) }

// JoinDecrypter opens join tokens sealed to the JoinService encryption key (X25519).
func (p *PKI) JoinDecrypter() ecdh.KeyExchanger { return p.joinEncryption }

// JoinEncryptionKey is the public half of the JoinService encryption key.
func (p *PKI) JoinEncryptionKey() *ecdh.PublicKey { return p.joinEncryption.PublicKey() }

// AgentCAPool is a pool holding the agent CA: what the QUIC endpoint verifies agents'
// client certificates against.
func (p *PKI) AgentCAPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.AgentCA)
	return pool
}

// agentCertificateLifetime is how long an agent certificate is valid.
const agentCertificateLifetime = 365 * 24 * time.Hour

// IssueAgentCertificate issues an agent's client certificate (DER) from the agent CA:
// Subject CommonName is the node id, OrganizationalUnit is [role], and the only
// extended key usage is client authentication.
func (p *PKI) IssueAgentCertificate(nodeID, role string, pub crypto.PublicKey) ([]byte, error) {
	now := p.clock.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: nodeID, OrganizationalUnit: []string{role}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(agentCertificateLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return x509.CreateCertificate(rand.Reader, tmpl, p.AgentCA, pub, p.agentCAKey)
}

// ServerCertificate issues a fresh certificate for the registry's listeners, valid for
// the given host names and addresses, signed by the serving CA.
func (p *PKI) ServerCertificate(hosts []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := p.clock.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "better-compute registry"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(90 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ServingCA, key.Public(), p.servingCAKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der, p.ServingCA.Raw}, PrivateKey: key}, nil
}

// loadOrCreateKey reads the PKCS#8 PEM private key at path, or makes one with generate
// and writes it (0600).
func loadOrCreateKey(path string, generate func() (any, error)) (any, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err := generate()
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, err
		}
		return key, fsutil.WriteFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	}
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: not a PEM PRIVATE KEY", path)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// writePins writes pins.json (0644: pins are public), unless it already says the same.
func writePins(path string, pins joinwire.Pins) error {
	data, err := json.MarshalIndent(pins, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return fsutil.WriteFileAtomic(path, data, 0o644)
}

// loadOrCreateCA reads name.crt and name.key from dir, or makes a self-signed CA.
func loadOrCreateCA(dir, name, commonName string, now time.Time) (*x509.Certificate, crypto.Signer, []byte, error) {
	certPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		return createCA(certPath, keyPath, commonName, now)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", certPath, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, pair.PrivateKey.(crypto.Signer), certPEM, nil
}

func createCA(certPath, keyPath, commonName string, now time.Time) (*x509.Certificate, crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	// The key lands first: a crash between the two writes leaves no certificate without
	// its key, and the next start makes both again.
	if err := fsutil.WriteFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, nil, nil, err
	}
	if err := fsutil.WriteFileAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, nil, nil, err
	}
	return cert, key, certPEM, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
