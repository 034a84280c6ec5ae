package join

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
)

func TestTrust(t *testing.T) {
	f := newFixture(t)
	other := newFixture(t)
	otherSigning, _, _ := ed25519.GenerateKey(rand.Reader)
	otherEnc, _ := ecdh.X25519().GenerateKey(rand.Reader)
	cases := map[string]struct {
		mutate func(d *joinwire.WellKnown)
		peer   []*x509.Certificate
		host   string
		reason string
		path   string
	}{
		"trusted":                 {peer: []*x509.Certificate{f.leaf}, host: "registry.test"},
		"another serving CA":      {mutate: func(d *joinwire.WellKnown) { d.ServingCA = pemCert(other.ca) }, peer: []*x509.Certificate{other.leaf}, host: "registry.test", reason: "pin-mismatch", path: "--serving-ca-pin"},
		"another signing key":     {mutate: func(d *joinwire.WellKnown) { d.JoinSigningKey, _ = joinwire.SigningKeyPEM(otherSigning) }, peer: []*x509.Certificate{f.leaf}, host: "registry.test", reason: "pin-mismatch", path: "--join-signing-pin"},
		"another encryption key":  {mutate: func(d *joinwire.WellKnown) { d.JoinEncryptionKey = joinwire.NewJWK(otherEnc.PublicKey()) }, peer: []*x509.Certificate{f.leaf}, host: "registry.test", reason: "pin-mismatch", path: "--join-encryption-pin"},
		"served by another CA":    {peer: []*x509.Certificate{other.leaf}, host: "registry.test", reason: "server-certificate"},
		"served for another host": {peer: []*x509.Certificate{f.leaf}, host: "elsewhere.test", reason: "server-certificate"},
		"no certificate":          {host: "registry.test", reason: "server-certificate"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			doc := f.document(t)
			if tc.mutate != nil {
				tc.mutate(&doc)
			}
			body, _ := json.Marshal(doc)
			_, err := trust(body, tc.peer, tc.host, f.pins)
			if tc.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			e := proto.AsError(err)
			if e.Code != proto.Unauthenticated || e.Details.Reason != tc.reason || e.Details.Path != tc.path {
				t.Fatalf("got %v (reason %q, path %q), want %s at %q", err, e.Details.Reason, e.Details.Path, tc.reason, tc.path)
			}
		})
	}
}

// FuzzTrustDocument feeds well-known documents to bcd's parsing and pin checks: nothing
// may panic, and only a document carrying exactly the pinned keys may be trusted.
func FuzzTrustDocument(f *testing.F) {
	fx := newFixture(f)
	good, _ := json.Marshal(fx.document(f))
	f.Add(good)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"servingCa":"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := trust(body, []*x509.Certificate{fx.leaf}, "registry.test", fx.pins)
		if err != nil {
			return
		}
		if !a.ServingCA.Equal(fx.ca) || !a.JoinSigningKey.Equal(fx.signing.Public()) || !a.JoinEncryptionKey.Equal(fx.enc.PublicKey()) {
			t.Fatal("trusted a document whose keys are not the pinned ones")
		}
		if err := joinwire.CheckEndpoints(a.AgentEndpoints); err != nil {
			t.Fatalf("trusted a document whose agentEndpoints are not host:port: %v", err)
		}
	})
}
