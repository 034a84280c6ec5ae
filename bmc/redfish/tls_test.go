package redfish

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// TestCAFileIsABoundedRegularFile: the site agent reads options.caFile only as a regular
// file of at most maxCAFile bytes; a device that reads without end (/dev/zero, which
// exhausted the agent's memory before: not run against that code) and a CA file padded
// past the bound (read whole and taken before) are INVALID_CONFIG at options.caFile.
func TestCAFileIsABoundedRegularFile(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bmc ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	dir := t.TempDir()
	good, padded := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "padded.pem")
	if err := os.WriteFile(good, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(padded, append(bytes.Repeat([]byte("\n"), maxCAFile), ca...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := httpClient(good, "", "127.0.0.1:443"); err != nil {
		t.Fatalf("a CA file: %v", err)
	}
	for _, path := range []string{"/dev/zero", padded, dir} {
		_, err := httpClient(path, "", "127.0.0.1:443")
		if proto.CodeOf(err) != proto.InvalidConfig || proto.AsError(err).Details.Path != "options.caFile" {
			t.Errorf("caFile %s: %v, want INVALID_CONFIG at options.caFile", path, err)
		}
	}
}
