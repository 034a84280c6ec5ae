package bcdconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto/bcdargv"
)

// Agent is what an agent mode runs its session with: the config, the agent's client
// certificate and the CA its registry's certificates chain to.
type Agent struct {
	Config      Config
	Certificate tls.Certificate
	ServingCAs  *x509.CertPool
}

// LoadAgent reads a joined configuration directory. A private key its group or others
// may use is refused (fsutil.ReadPrivate), as ssh refuses one. A directory with a key
// and no config.toml, or a key and certificate that are no pair, is a join cut short
// (Write): the refusal says to join again, with a new token, since the registry spent
// the one the join sent.
func LoadAgent(dir string) (Agent, error) {
	c, err := Load(dir)
	if errors.Is(err, os.ErrNotExist) {
		if _, keyErr := os.Stat(filepath.Join(dir, KeyFile)); keyErr == nil {
			return Agent{}, fmt.Errorf("%w: %s holds an agent key but no %s, so a `bcd join` into it was cut short: %s", err, dir, bcdargv.ConfigFile, joinAgain)
		}
		return Agent{}, fmt.Errorf("%w (run `bcd join` first)", err)
	}
	if err != nil {
		return Agent{}, err
	}
	if c.AgentEndpoint == "" {
		return Agent{}, fmt.Errorf("%s names no agentEndpoint: join again with a registry that runs the agent endpoint", filepath.Join(dir, bcdargv.ConfigFile))
	}
	certFile, keyFile := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	if _, err := os.Stat(filepath.Join(dir, RenewedFile)); err == nil {
		certFile, keyFile = filepath.Join(dir, RenewedFile), filepath.Join(dir, RenewedFile) // a renewal's save was cut short
	}
	keyPEM, err := fsutil.ReadPrivate(keyFile) // refused when others may read the key
	if err != nil {
		return Agent{}, err
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return Agent{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return Agent{}, fmt.Errorf("agent certificate in %s: %w: %s and %s are not a key and its certificate: %s", dir, err, keyFile, certFile, joinAgain)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, ServingCAFile))
	if err != nil {
		return Agent{}, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return Agent{}, fmt.Errorf("%s holds no certificate", filepath.Join(dir, ServingCAFile))
	}
	return Agent{Config: c, Certificate: cert, ServingCAs: pool}, nil
}

// joinAgain is what to do about a configuration directory a join or its files' changes
// left unusable.
const joinAgain = "mint a new join token for the node and run `bcd join` again"

// SaveRenewed keeps a renewed certificate and its key in dir in place of the ones the
// join wrote. A crash at any point leaves a key and certificate that match: both go
// first into RenewedFile in one atomic write, which LoadAgent prefers while it exists,
// then over KeyFile and CertFile, and RenewedFile goes last.
func SaveRenewed(dir string, cert tls.Certificate) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return fmt.Errorf("renewed key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	renewed := filepath.Join(dir, RenewedFile)
	if err := fsutil.WriteFileAtomic(renewed, append(slices.Clone(keyPEM), certPEM...), 0o600); err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, KeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, CertFile), certPEM, 0o644); err != nil {
		return err
	}
	return os.Remove(renewed)
}
