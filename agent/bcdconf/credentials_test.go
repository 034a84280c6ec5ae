package bcdconf

import (
	"crypto/x509"
	"encoding/pem"
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
	if err := SaveRenewed(dir, renewed); err != nil {
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
	if err := SaveRenewed(cut, renewed); err != nil {
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
