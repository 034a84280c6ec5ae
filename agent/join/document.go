package join

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
)

// fetchDocument gets the registry's well-known document and the certificate chain the
// server presented. The chain is not verified here: nothing is trusted yet, and nothing
// secret is sent on this connection. trust checks the chain against the document's CA
// once that CA matched its pin.
func fetchDocument(ctx context.Context, server *url.URL) ([]byte, []*x509.Certificate, error) {
	client := &http.Client{
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13},
		},
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer client.CloseIdleConnections()
	u := server.JoinPath(joinwire.WellKnownPath)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, proto.Errorf(proto.Internal, "fetch the well-known document from %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, joinwire.MaxDocument+1))
	if err != nil {
		return nil, nil, proto.Errorf(proto.Internal, "read the well-known document from %s: %v", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, proto.Errorf(proto.InvalidConfig, "%s answered %s: is --server a better-compute registry?", u, resp.Status)
	}
	if len(body) > joinwire.MaxDocument {
		return nil, nil, proto.Errorf(proto.InvalidInput, "the well-known document from %s is over %d bytes", u, joinwire.MaxDocument)
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return nil, nil, proto.Errorf(proto.Unauthenticated, "%s presented no certificate", u)
	}
	return body, resp.TLS.PeerCertificates, nil
}

// trust accepts a well-known document only when each of its three keys matches its pin
// and the server that served it presented a certificate for host chaining to the
// document's serving CA. Each refusal names the pin or check that failed.
func trust(body []byte, peer []*x509.Certificate, host string, pins joinwire.Pins) (joinwire.Anchors, error) {
	a, err := joinwire.ParseWellKnown(body)
	if err != nil {
		return joinwire.Anchors{}, proto.Errorf(proto.InvalidInput, "%v", err)
	}
	mismatch := func(flag, what string) error {
		return proto.Errorf(proto.Unauthenticated, "%s does not match the %s in the registry's well-known document: refusing to trust it (compare the pin with pins.json in the registry's data directory)", flag, what).WithPath(flag).WithReason(proto.ReasonPinMismatch)
	}
	if !joinwire.MatchPin(pins.ServingCA, a.ServingCA.PublicKey) {
		return joinwire.Anchors{}, mismatch("--serving-ca-pin", "serving CA")
	}
	if !joinwire.MatchPin(pins.JoinSigning, a.JoinSigningKey) {
		return joinwire.Anchors{}, mismatch("--join-signing-pin", "join signing key")
	}
	if !joinwire.MatchPin(pins.JoinEncryption, a.JoinEncryptionKey) {
		return joinwire.Anchors{}, mismatch("--join-encryption-pin", "join encryption key")
	}
	if len(peer) == 0 {
		return joinwire.Anchors{}, proto.Errorf(proto.Unauthenticated, "the registry presented no certificate").WithReason(proto.ReasonServerCertificate)
	}
	roots := x509.NewCertPool()
	roots.AddCert(a.ServingCA)
	inter := x509.NewCertPool()
	for _, c := range peer[1:] {
		inter.AddCert(c)
	}
	if _, err := peer[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return joinwire.Anchors{}, proto.Errorf(proto.Unauthenticated, "the registry's TLS certificate does not chain to the pinned serving CA of its well-known document: %v", err).WithReason(proto.ReasonServerCertificate)
	}
	return a, nil
}
