package bcdconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/testkit"
)

// TestSaveRenewed: a renewed certificate replaces the joined one, and a save cut short
// after its first write still loads a key and certificate that match, the renewed ones.
func TestSaveRenewed(t *testing.T) {
	ca, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	joined, err := ca.AgentCertificate("node-1", "node")
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := ca.AgentCertificate("node-1", "node")
	if err != nil {
		t.Fatal(err)
	}
	joinedKey, err := x509.MarshalPKCS8PrivateKey(joined.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate().Raw})
	bundle := Bundle{Config: sample(), Key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: joinedKey}),
		Certificate: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: joined.Certificate[0]}), AgentCA: caPEM, ServingCA: caPEM, JoinEncryptionKey: []byte("{}")}
	loaded := func(dir string) []byte {
		t.Helper()
		a, err := LoadAgent(dir)
		if err != nil {
			t.Fatal(err)
		}
		return a.Certificate.Certificate[0]
	}

	dir := t.TempDir()
	if err := Write(dir, bundle); err != nil {
		t.Fatal(err)
	}
	if err := SaveRenewed(dir, joined, renewed); err != nil {
		t.Fatal(err)
	}
	if string(loaded(dir)) != string(renewed.Certificate[0]) {
		t.Error("after SaveRenewed the joined certificate loads")
	}
	if _, err := os.Stat(filepath.Join(dir, RenewedFile)); !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", RenewedFile, err)
	}

	// Cut short: the renewed pair is written, and only the key replaced: the key and
	// certificate files do not match.
	cut := t.TempDir()
	if err := Write(cut, bundle); err != nil {
		t.Fatal(err)
	}
	if err := SaveRenewed(cut, joined, renewed); err != nil {
		t.Fatal(err)
	}
	both, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	both = append(both, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: renewed.Certificate[0]})...)
	if err := os.WriteFile(filepath.Join(cut, RenewedFile), both, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cut, CertFile), bundle.Certificate, 0o644); err != nil {
		t.Fatal(err)
	}
	if string(loaded(cut)) != string(renewed.Certificate[0]) {
		t.Error("a save cut short: the renewed certificate does not load")
	}
}

// TestRenewalAfterARejoinIsNotSaved: a running agent of node-1 renews its certificate
// after a `bcd join` of node-2 into its configuration directory. The renewal must not go
// beside node-2's config: the directory keeps node-2's join whole, and the next start
// runs as node-2, not as node-1 with node-2's config. A renewal over the agent's own
// certificate, or over a cut-short renewal of it, is saved.
func TestRenewalAfterARejoinIsNotSaved(t *testing.T) {
	first, firstCert := joined(t, "node-1")
	second, _ := joined(t, "node-2")
	dir := t.TempDir()
	if err := Write(dir, first); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, second); err != nil {
		t.Fatal(err)
	}
	renewed := renewalOf(t, firstCert)
	if err := SaveRenewed(dir, firstCert, renewed); !errors.Is(err, ErrJoinedSince) {
		t.Fatalf("node-1's renewal saved over node-2's join: %v, want ErrJoinedSince", err)
	}
	if whole := wholeJoin(t, dir, []Bundle{first, second}); whole != 1 {
		t.Fatalf("the directory holds join %d, want node-2's whole", whole)
	}
	a, err := LoadAgent(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cn := a.Certificate.Leaf.Subject.CommonName; cn != "node-2" {
		t.Errorf("the next start runs as %q with node-2's config", cn)
	}

	// Its own: saved, and a second renewal over the first saved too.
	own := t.TempDir()
	if err := Write(own, first); err != nil {
		t.Fatal(err)
	}
	if err := SaveRenewed(own, firstCert, renewed); err != nil {
		t.Fatal(err)
	}
	if err := SaveRenewed(own, renewed, renewalOf(t, renewed)); err != nil {
		t.Fatalf("a second renewal: %v", err)
	}
}

// renewalOf is a new certificate and key for cert's node.
func renewalOf(t *testing.T, cert tls.Certificate) tls.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	ca, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := ca.AgentCertificate(leaf.Subject.CommonName, "node")
	if err != nil {
		t.Fatal(err)
	}
	return renewed
}
