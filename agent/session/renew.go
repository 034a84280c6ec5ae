package session

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
)

// Renew asks the registry for a certificate of this agent's node and role for key, and
// presents it (with key) on every later connection; the current one keeps its session.
// The kept session ticket is dropped, so the next connection's handshake is a full one
// with the new certificate. It returns the certificate, for the caller to keep with the
// agent's credentials. Without a session, or when the session ends first, it fails as
// Secret does; the registry's refusal is the *proto.Error it sent.
func (a *Agent) Renew(ctx context.Context, key crypto.Signer) (tls.Certificate, error) {
	spki, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return tls.Certificate{}, proto.Errorf(proto.InvalidInput, "renewal key: %v", err)
	}
	m, err := a.call(ctx, "renew the agent certificate", func(id string) *proto.Message {
		return &proto.Message{Type: proto.MsgRenewRequest, RenewRequest: &proto.RenewRequest{ID: id, PublicKey: spki}}
	})
	if err != nil {
		return tls.Certificate{}, err
	}
	if m.Renewal.Error != nil {
		return tls.Certificate{}, m.Renewal.Error
	}
	leaf, err := x509.ParseCertificate(m.Renewal.Certificate)
	if err != nil {
		return tls.Certificate{}, proto.Errorf(proto.InvalidInput, "the registry's renewed certificate: %v", err)
	}
	if pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); leaf.Subject.CommonName != a.node || !ok || !pub.Equal(key.Public()) {
		return tls.Certificate{}, proto.Errorf(proto.InvalidInput, "the registry's renewed certificate names %q and another key; this agent is %q", leaf.Subject.CommonName, a.node)
	}
	cert := tls.Certificate{Certificate: [][]byte{m.Renewal.Certificate}, PrivateKey: key, Leaf: leaf}
	a.certMu.Lock()
	a.cert = cert
	a.certMu.Unlock()
	a.tickets.forget()
	return cert, nil
}

// certificate is the client certificate the next connection presents.
func (a *Agent) certificate() *tls.Certificate {
	a.certMu.Lock()
	defer a.certMu.Unlock()
	c := a.cert
	return &c
}

// renewalCheck is how often KeepRenewed looks at the certificate's expiry.
const renewalCheck = time.Hour

// KeepRenewed renews the agent's certificate whenever it is due (proto.RenewDue on the
// session's clock), with a new ECDSA P-256 key, and hands each new certificate to save
// with the one it replaces, which keeps it where the agent's credentials live, until ctx
// ends. A renewal that fails is logged and tried again at the next hourly check.
func (a *Agent) KeepRenewed(ctx context.Context, save func(previous, renewed tls.Certificate) error) {
	for {
		if leaf := a.certificate().Leaf; leaf != nil && proto.RenewDue(leaf.NotBefore, leaf.NotAfter, a.cfg.Clock.Now()) {
			a.renewOnce(ctx, leaf.NotAfter, save)
		}
		if clock.Sleep(ctx, a.cfg.Clock, renewalCheck) != nil {
			return
		}
	}
}

// renewOnce renews the certificate that expires at expires and saves it, logging the
// outcome.
func (a *Agent) renewOnce(ctx context.Context, expires time.Time, save func(previous, renewed tls.Certificate) error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err == nil {
		previous := *a.certificate()
		var cert tls.Certificate
		if cert, err = a.Renew(ctx, key); err == nil {
			err = save(previous, cert)
		}
		if err == nil {
			a.log.Info("agent certificate renewed", "previousExpiry", expires, "expires", cert.Leaf.NotAfter)
			return
		}
	}
	a.log.Warn("agent certificate renewal failed; trying again within the hour", "expires", expires, "err", err)
}
