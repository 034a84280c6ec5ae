package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/google/go-cmp/cmp"
)

func TestLoadOrCreateKeepsKeysAndWritesPins(t *testing.T) {
	dir := t.TempDir()
	first, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	pins := first.Pins()
	for name, pin := range map[string]string{"serving CA": pins.ServingCA, "join signing": pins.JoinSigning, "join encryption": pins.JoinEncryption} {
		if err := joinwire.CheckPin(pin); err != nil {
			t.Errorf("%s pin: %v", name, err)
		}
	}
	if !joinwire.MatchPin(pins.JoinEncryption, first.JoinEncryptionKey()) || !joinwire.MatchPin(pins.JoinSigning, first.JoinSigningKey()) {
		t.Errorf("pins do not match the public keys")
	}
	data, err := os.ReadFile(filepath.Join(dir, PinsFile))
	if err != nil {
		t.Fatal(err)
	}
	var onDisk joinwire.Pins
	if err := json.Unmarshal(data, &onDisk); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(pins, onDisk); diff != "" {
		t.Errorf("pins.json (-want +got):\n%s", diff)
	}
	for _, name := range []string{"serving-ca.key", "agent-ca.key", "join-signing.key", "join-encryption.key"} {
		st, err := os.Stat(filepath.Join(dir, Dir, name))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", name, err)
		}
	}
	again, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(pins, again.Pins()); diff != "" {
		t.Errorf("pins changed on reload (-first +again):\n%s", diff)
	}
}

func TestIssueAgentCertificate(t *testing.T) {
	p, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := p.IssueAgentCertificate("node-1", joinwire.RoleNode, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	got := struct {
		CN  string
		OU  []string
		EKU []x509.ExtKeyUsage
	}{cert.Subject.CommonName, cert.Subject.OrganizationalUnit, cert.ExtKeyUsage}
	want := struct {
		CN  string
		OU  []string
		EKU []x509.ExtKeyUsage
	}{"node-1", []string{"node"}, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("certificate (-want +got):\n%s", diff)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: p.AgentCAPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("does not chain to the agent CA: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Errorf("verified without the agent CA")
	}
}

// TestLoadOrCreateRemovesLeftovers plants what a kill during a first start leaves (a
// key's temporary file in pki/, admin.conf's and pins.json's in the data directory):
// the next start removes them and keeps everything else.
func TestLoadOrCreateRemovesLeftovers(t *testing.T) {
	dataDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dataDir, Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	leftovers := []string{filepath.Join(Dir, ".serving-ca.key.tmp-3141592653"), filepath.Join(Dir, ".secrets.key.tmp-77"),
		".admin.conf.tmp-1234", ".pins.json.tmp-5"}
	for _, name := range append(leftovers, "registry.db", "hardware-profiles.json") {
		if err := os.WriteFile(filepath.Join(dataDir, name), []byte("-----BEGIN PRIVATE KEY-----\npart"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := LoadOrCreate(dataDir); err != nil {
		t.Fatal(err)
	}
	for _, name := range leftovers {
		if _, err := os.Stat(filepath.Join(dataDir, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", name, err)
		}
	}
	for _, name := range []string{"registry.db", "hardware-profiles.json", filepath.Join(Dir, "serving-ca.key"), PinsFile} {
		if _, err := os.Stat(filepath.Join(dataDir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
