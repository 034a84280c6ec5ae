package bcdconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
)

// Agent is what an agent mode runs its session with: the config, the agent's client
// certificate and the CA its registry's certificates chain to.
type Agent struct {
	Config      Config
	Certificate tls.Certificate
	ServingCAs  *x509.CertPool
}

// LoadAgent reads a joined configuration directory.
func LoadAgent(dir string) (Agent, error) {
	c, err := Load(dir)
	if err != nil {
		return Agent{}, fmt.Errorf("%w (run `bcd join` first)", err)
	}
	if c.AgentEndpoint == "" {
		return Agent{}, fmt.Errorf("%s names no agentEndpoint: join again with a registry that runs the agent endpoint", filepath.Join(dir, ConfigFile))
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		return Agent{}, fmt.Errorf("agent certificate in %s: %w", dir, err)
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
