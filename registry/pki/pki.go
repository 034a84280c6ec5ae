// Package pki keeps the registry's keys and certificates in the data directory: made on
// first start, loaded on every later one. The serving CA signs the certificate the
// registry presents on HTTPS and QUIC; the CLI trusts that CA through its config file.
// The join keys (the JoinResponse signing key and the JoinService encryption key) and
// the agent CA, which issues the agents' client certificates, live beside it; the pins
// of the three keys an agent checks are written to DATA_DIR/pins.json. Registries that
// share a store keep these keys in it instead, sealed with a key-encryption key that each
// reads from a file of its own (sealed.go).
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
	"strconv"
	"strings"
	"time"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/seal"
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
	// id names the PKI (ID).
	id string
	// clock stamps what the PKI issues.
	clock Clock
	// unwritten are the files Load made and Write has not written yet.
	unwritten []file
}

// file is a file of DATA_DIR/pki to write: its path, content and mode.
type file struct {
	path string
	data []byte
	mode os.FileMode
}

// Clock tells the time certificates are stamped with: the registry's clock.Clock.
type Clock interface{ Now() time.Time }

// LoadOrCreate loads the PKI from dataDir, making what is missing (Load), and writes
// what it made and the pins (Write).
func LoadOrCreate(dataDir string, clk Clock) (*PKI, error) {
	p, err := Load(dataDir, clk)
	if err != nil {
		return nil, err
	}
	return p, p.Write(dataDir)
}

// Load reads the PKI from dataDir and makes what is missing in memory, writing nothing:
// Made names the files it made, and Write writes them. A start refused after it (a PKI
// the store does not record, say) leaves the data directory as it found it. Every
// certificate it makes or issues is valid from clk's time.
func Load(dataDir string, clk Clock) (*PKI, error) {
	dir := filepath.Join(dataDir, Dir)
	p := &PKI{clock: clk}
	var err error
	if p.ServingCA, p.servingCAKey, p.ServingCAPEM, err = p.loadOrMakeCA(dir, "serving-ca", "better-compute serving CA"); err != nil {
		return nil, err
	}
	if p.AgentCA, p.agentCAKey, p.AgentCAPEM, err = p.loadOrMakeCA(dir, "agent-ca", "better-compute agent CA"); err != nil {
		return nil, err
	}
	signing, err := p.loadOrMakeKey(filepath.Join(dir, "join-signing.key"), newJoinSigningKey)
	if err != nil {
		return nil, err
	}
	encryption, err := p.loadOrMakeKey(filepath.Join(dir, "join-encryption.key"), newJoinEncryptionKey)
	if err != nil {
		return nil, err
	}
	if err := p.setJoinKeys(signing, encryption, dir); err != nil {
		return nil, err
	}
	return p, nil
}

// Made names the files of DATA_DIR/pki that Load did not find and made in memory, in
// the order Write writes them; none when it found them all.
func (p *PKI) Made() []string {
	var names []string
	for _, f := range p.unwritten {
		names = append(names, f.path)
	}
	return names
}

// Write writes what Load made to DATA_DIR/pki (made 0700) and the pins to
// DATA_DIR/pins.json. It first removes what a start killed in the middle of writing a
// file left in DATA_DIR and DATA_DIR/pki (.serving-ca.key.tmp-*, .admin.conf.tmp-*):
// the registry calls it holding the store's lock, so no other registry writes there.
func (p *PKI) Write(dataDir string) error {
	dir := filepath.Join(dataDir, Dir)
	if err := fsutil.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, d := range []string{dataDir, dir} {
		if _, err := fsutil.RemoveTemps(d); err != nil {
			return fmt.Errorf("remove what an interrupted write left in %s: %w", d, err)
		}
	}
	for len(p.unwritten) > 0 {
		f := p.unwritten[0]
		if err := fsutil.WriteFileAtomic(f.path, f.data, f.mode); err != nil {
			return err
		}
		p.unwritten = p.unwritten[1:]
	}
	return p.WritePins(dataDir)
}

// WritePins writes the pins to DATA_DIR/pins.json, for the operator to hand to bcd join.
func (p *PKI) WritePins(dataDir string) error {
	if err := writePins(filepath.Join(dataDir, PinsFile), p.pins); err != nil {
		return fmt.Errorf("write the pins: %w", err)
	}
	return nil
}

func newJoinSigningKey() (any, error) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	return k, err
}

func newJoinEncryptionKey() (any, error) { return ecdh.X25519().GenerateKey(rand.Reader) }

// setJoinKeys takes the join keys, checking their kinds (where says where they were
// read), and makes the pins.
func (p *PKI) setJoinKeys(signing, encryption any, where string) error {
	var ok bool
	if p.joinSigning, ok = signing.(ed25519.PrivateKey); !ok {
		return fmt.Errorf("%s: the join signing key is an %s key, not Ed25519", where, proto.KeyAlgorithm(signing))
	}
	if p.joinEncryption, ok = encryption.(*ecdh.PrivateKey); !ok || p.joinEncryption.Curve() != ecdh.X25519() {
		return fmt.Errorf("%s: the join encryption key is an %s key, not X25519", where, proto.KeyAlgorithm(encryption))
	}
	return p.makePins()
}

func (p *PKI) makePins() (err error) {
	if p.pins.ServingCA, err = joinwire.Pin(p.ServingCA.PublicKey); err != nil {
		return err
	}
	if p.pins.JoinSigning, err = joinwire.Pin(p.joinSigning.Public()); err != nil {
		return err
	}
	if p.pins.JoinEncryption, err = joinwire.Pin(p.joinEncryption.PublicKey()); err != nil {
		return err
	}
	agentCA, err := joinwire.Pin(p.AgentCA.PublicKey)
	pub := strings.Join([]string{p.pins.ServingCA, agentCA, p.pins.JoinSigning, p.pins.JoinEncryption}, "\x00")
	p.id = "pki_" + seal.ID("better-compute pki id", []byte(pub))
	return err
}

// Pins are the pins of the serving CA, the JoinResponse signing key and the JoinService
// encryption key: what an agent must be given, out of band, to join.
func (p *PKI) Pins() joinwire.Pins { return p.pins }

// ID names the PKI without revealing a private key: a hash of the public keys of the
// serving CA, the agent CA and the join keys, which every agent that joined and every
// join token minted depend on. The store records it (registry/store's PKIKey), so a
// start whose PKI was lost and made anew is told apart from the one the store's agents
// know.
func (p *PKI) ID() string { return p.id }

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

// IssueAgentCertificate issues the client certificate (DER) of the agent c names, for
// its key pub, from the agent CA: Subject CommonName is the node id, OrganizationalUnit
// is [role], and the only extended key usage is client authentication. It names the
// identity epoch it belongs to in the Subject's serialNumber (proto.IdentityEpoch): for
// a machine's agent (role node or ramdisk) the machine's installation, for a site agent
// its site's count of revocations. A ramdisk's names the workflow run that minted its
// join token in the Subject's description (proto.AgentRun); a Run of "" names none.
func (p *PKI) IssueAgentCertificate(c proto.AgentCredential, pub crypto.PublicKey) ([]byte, error) {
	now := p.clock.Now()
	subject := pkix.Name{CommonName: c.Node, OrganizationalUnit: []string{string(c.Role)}, SerialNumber: strconv.FormatInt(c.Epoch, 10),
		ExtraNames: proto.AgentRunName(c.Run)}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
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

// loadOrMakeKey reads the PKCS#8 PEM private key at path, or makes one with generate,
// to be written (0600) by Write.
func (p *PKI) loadOrMakeKey(path string, generate func() (any, error)) (any, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err := generate()
		if err != nil {
			return nil, err
		}
		keyPEM, err := privateKeyPEM(key)
		if err != nil {
			return nil, err
		}
		p.unwritten = append(p.unwritten, file{path, keyPEM, 0o600})
		return key, nil
	}
	if err != nil {
		return nil, err
	}
	return parsePrivateKeyPEM(path, data)
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

// loadOrMakeCA reads name.crt and name.key from dir, or makes a self-signed CA valid
// from the PKI's clock's time, to be written by Write.
func (p *PKI) loadOrMakeCA(dir, name, commonName string) (*x509.Certificate, crypto.Signer, []byte, error) {
	certPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		cert, key, certPEM, keyPEM, err := newCA(commonName, p.clock.Now())
		if err != nil {
			return nil, nil, nil, err
		}
		// The key lands first: a crash between the two writes leaves no certificate
		// without its key, and the next start makes both again.
		p.unwritten = append(p.unwritten, file{keyPath, keyPEM, 0o600}, file{certPath, certPEM, 0o644})
		return cert, key, certPEM, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, key, err := parseCA(certPath, certPEM, keyPEM)
	return cert, key, certPEM, err
}

// parseCA reads a CA's PEM certificate and key; name says where they were read, in errors.
func parseCA(name string, certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s: a %T key cannot sign", name, pair.PrivateKey)
	}
	return cert, key, nil
}

// newCA makes a self-signed CA valid for ten years from now, in memory: its
// certificate, its key, and both as PEM.
func newCA(commonName string, now time.Time) (cert *x509.Certificate, key crypto.Signer, certPEM, keyPEM []byte, err error) {
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, nil, err
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
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, ecKey.Public(), ecKey)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		return nil, nil, nil, nil, err
	}
	if keyPEM, err = privateKeyPEM(ecKey); err != nil {
		return nil, nil, nil, nil, err
	}
	return cert, ecKey, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// privateKeyPEM is key as a PKCS#8 PEM PRIVATE KEY.
func privateKeyPEM(key any) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parsePrivateKeyPEM reads a PKCS#8 PEM PRIVATE KEY; name says whose, in errors.
func parsePrivateKeyPEM(name string, data []byte) (any, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: not a PEM PRIVATE KEY", name)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return key, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
