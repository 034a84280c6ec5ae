package bcdconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
)

// Identity is what an agent mode connects to the registry with: its client certificate
// and the registry's serving CA.
type Identity struct {
	Certificate tls.Certificate
	ServingCAs  *x509.CertPool
}

// LoadIdentity reads the agent's key, certificate and the serving CA from dir.
func LoadIdentity(dir string) (Identity, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		return Identity{}, fmt.Errorf("agent key and certificate in %s: %w (join first)", dir, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, ServingCAFile))
	if err != nil {
		return Identity{}, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return Identity{}, fmt.Errorf("%s holds no certificate", filepath.Join(dir, ServingCAFile))
	}
	return Identity{Certificate: cert, ServingCAs: pool}, nil
}
