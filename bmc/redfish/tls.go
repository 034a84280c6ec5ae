package redfish

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
)

// httpClient makes the client the driver reaches the BMC with. The BMC's certificate
// must chain to caFile's certificates (the system's roots when both are empty), or its
// key must match pin (sha256/BASE64 of its SubjectPublicKeyInfo): how a BMC with a
// self-signed certificate is trusted.
func httpClient(caFile, pin string) (*http.Client, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" && pin != "" {
		return nil, proto.Errorf(proto.InvalidConfig, "options caFile and tlsPin exclude each other: trust the BMC by its CA or by its key").WithPath("options.tlsPin")
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, proto.Errorf(proto.InvalidConfig, "option caFile: %v", err).WithPath("options.caFile")
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, proto.Errorf(proto.InvalidConfig, "option caFile %s holds no PEM certificate", caFile).WithPath("options.caFile")
		}
		cfg.RootCAs = pool
	}
	if pin != "" {
		if err := joinwire.CheckPin(pin); err != nil {
			return nil, proto.Errorf(proto.InvalidConfig, "option tlsPin: %v", err).WithPath("options.tlsPin")
		}
		// The pinned key is what is trusted: neither the chain nor the name is checked,
		// only the leaf's key against the pin.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !joinwire.MatchPin(pin, cs.PeerCertificates[0].PublicKey) {
				return errors.New("the BMC's certificate key does not match option tlsPin")
			}
			return nil
		}
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: 15 * time.Second,
		IdleConnTimeout:     time.Minute,
		ForceAttemptHTTP2:   true,
	}}, nil
}
