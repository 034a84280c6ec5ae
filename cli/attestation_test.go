package cli

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// TestAttestationVerifiesWithOpenSSL runs the very commands `workflows attestation`
// prints, with bash and the openssl command line, on the files it writes for a result
// signed with each kind of agent key, and checks that they fail on a tampered payload
// and on a certificate of another CA.
func TestAttestationVerifiesWithOpenSSL(t *testing.T) {
	ca, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := testkit.NewCA()
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	for _, key := range []crypto.Signer{ecKey, edKey} {
		cert, err := ca.IssueAgent("node-1", "ramdisk", key.Public())
		if err != nil {
			t.Fatal(err)
		}
		sr, err := proto.SignResult(key, proto.ResultPayload{NodeID: "node-1", CommandID: "wf_1:main.4:a1", Kind: proto.CommandDiskWipe, Result: json.RawMessage(`{"mode":"quick","disks":[]}`)})
		if err != nil {
			t.Fatal(err)
		}
		sr.Certificate = cert
		dir := t.TempDir()
		if _, err := writeAttestation(dir, &sr, false); err != nil {
			t.Fatal(err)
		}
		// Into a directory that holds the files already: refused unless --force.
		if _, err := writeAttestation(dir, &sr, false); proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "--out" {
			t.Errorf("%s: writing over the files: %v, want INVALID_INPUT at --out", sr.Algorithm, err)
		}
		if _, err := writeAttestation(dir, &sr, true); err != nil {
			t.Errorf("%s: writing over the files with --force: %v", sr.Algorithm, err)
		}
		caPEM, _, _ := ca.PEM()
		otherPEM, _, _ := other.PEM()
		os.WriteFile(filepath.Join(dir, "agent-ca.crt"), caPEM, 0o644)
		script := strings.Join(append([]string{"set -e"}, verifyCommands(sr.Algorithm)...), "\n")
		run := func() (string, error) {
			cmd := osexec.Command("bash", "-c", script)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if out, err := run(); err != nil || !strings.Contains(out, "CN = node-1") {
			t.Fatalf("%s: the printed commands fail: %v\n%s", sr.Algorithm, err, out)
		}
		payload, _ := os.ReadFile(filepath.Join(dir, "payload.json"))
		tampered := strings.Replace(string(payload), `"quick"`, `"qu1ck"`, 1)
		os.WriteFile(filepath.Join(dir, "payload.json"), []byte(tampered), 0o644)
		os.WriteFile(filepath.Join(dir, "message"), proto.SignedMessage([]byte(tampered)), 0o644)
		if out, err := run(); err == nil {
			t.Errorf("%s: a tampered payload verified:\n%s", sr.Algorithm, out)
		}
		os.WriteFile(filepath.Join(dir, "payload.json"), payload, 0o644)
		os.WriteFile(filepath.Join(dir, "message"), proto.SignedMessage(payload), 0o644)
		os.WriteFile(filepath.Join(dir, "agent-ca.crt"), otherPEM, 0o644)
		if out, err := run(); err == nil {
			t.Errorf("%s: a certificate of another CA verified:\n%s", sr.Algorithm, out)
		}
		certPEM, _ := os.ReadFile(filepath.Join(dir, "certificate.pem"))
		if b, _ := pem.Decode(certPEM); b == nil || string(b.Bytes) != string(cert) {
			t.Errorf("certificate.pem is not the signing certificate")
		}
	}
}
