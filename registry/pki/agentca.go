package pki

import (
	"crypto/x509"
	"path/filepath"
)

// LoadOrCreateAgentCA loads the CA whose client certificates name agents (made on first
// start, as agent-ca.crt and agent-ca.key in the PKI directory) and returns a pool of it
// for the agent endpoint to verify agents against. Issuing agent certificates belongs to
// join.
func LoadOrCreateAgentCA(dataDir string) (*x509.CertPool, error) {
	cert, _, _, err := loadOrCreateCA(filepath.Join(dataDir, Dir), "agent-ca", "better-compute agent CA")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool, nil
}
