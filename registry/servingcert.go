package registry

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"sync"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/pki"
)

// servingCertificate is the certificate of the registry's listeners (HTTPS and the agent
// endpoint), from its serving CA. It is issued at start and again at the first handshake
// once proto.RenewDue holds (30 days before its 90 run out), so that a registry that runs
// for months never presents an expired one; clients pin the CA, not the certificate.
type servingCertificate struct {
	keys  *pki.PKI
	hosts []string
	now   func() time.Time
	log   *slog.Logger

	mu   sync.Mutex
	cert tls.Certificate
}

func newServingCertificate(keys *pki.PKI, hosts []string, now func() time.Time, log *slog.Logger) (*servingCertificate, error) {
	s := &servingCertificate{keys: keys, hosts: hosts, now: now, log: log}
	cert, err := s.issue()
	s.cert = cert
	return s, err
}

// issue makes a new certificate, with its leaf parsed.
func (s *servingCertificate) issue() (tls.Certificate, error) {
	cert, err := s.keys.ServerCertificate(s.hosts)
	if err == nil {
		cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0])
	}
	return cert, err
}

// get is tls.Config.GetCertificate: the current certificate, renewed first when due. A
// renewal that fails is logged, and the current one, still valid, is presented.
func (s *servingCertificate) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if proto.RenewDue(s.cert.Leaf.NotBefore, s.cert.Leaf.NotAfter, s.now()) {
		cert, err := s.issue()
		if err != nil {
			s.log.Error("renewing the serving certificate", "expires", s.cert.Leaf.NotAfter, "err", err)
		} else {
			s.log.Info("serving certificate renewed", "expires", cert.Leaf.NotAfter)
			s.cert = cert
		}
	}
	c := s.cert
	return &c, nil
}
