package redfish

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
)

// httpClient makes the client the driver reaches the BMC with. The BMC's certificate
// must chain to caFile's certificates (the system's roots when both are empty), or its
// key must match pin (sha256/BASE64 of its SubjectPublicKeyInfo): how a BMC with a
// self-signed certificate is trusted. It reaches host (the BMC's host:port) only.
func httpClient(caFile, pin, host string) (*http.Client, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" && pin != "" {
		return nil, proto.Errorf(proto.InvalidConfig, "options caFile and tlsPin exclude each other: trust the BMC by its CA or by its key").WithPath("options.tlsPin")
	}
	if caFile != "" {
		pem, err := readCAFile(caFile)
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
	return &http.Client{Transport: &oneHost{host: host, next: &http.Transport{
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: 15 * time.Second,
		IdleConnTimeout:     time.Minute,
		ForceAttemptHTTP2:   true,
	}}}, nil
}

// maxCAFile bounds the CA file the site agent reads: a bundle of CAs, not more.
const maxCAFile = 1 << 20

// readCAFile reads the PEM file of options.caFile: a regular file of at most maxCAFile
// bytes, so that no path a binding names (a device that reads without end, a pipe that
// never ends) exhausts or stalls the site agent, which every tenant of the site shares.
func readCAFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, err
	case !info.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", path)
	case info.Size() > maxCAFile:
		return nil, fmt.Errorf("%s is %d bytes; a CA file is at most %d", path, info.Size(), maxCAFile)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pem, err := io.ReadAll(io.LimitReader(f, maxCAFile+1))
	if err == nil && len(pem) > maxCAFile {
		err = fmt.Errorf("%s is over %d bytes; a CA file is at most that", path, maxCAFile)
	}
	return pem, err
}
