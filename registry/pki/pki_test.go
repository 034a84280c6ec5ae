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
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/google/go-cmp/cmp"
)

func TestLoadOrCreateKeepsKeysAndWritesPins(t *testing.T) {
	dir := t.TempDir()
	first, err := LoadOrCreate(dir, clock.Real{})
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
	again, err := LoadOrCreate(dir, clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(pins, again.Pins()); diff != "" {
		t.Errorf("pins changed on reload (-first +again):\n%s", diff)
	}
}

func TestIssueAgentCertificate(t *testing.T) {
	p, err := LoadOrCreate(t.TempDir(), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := p.IssueAgentCertificate(proto.AgentCredential{Node: "node-1", Role: proto.Role(joinwire.RoleNode), Epoch: 3}, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := proto.IdentityEpoch(cert)
	if err != nil {
		t.Fatal(err)
	}
	got := struct {
		CN    string
		OU    []string
		EKU   []x509.ExtKeyUsage
		Epoch int64
	}{cert.Subject.CommonName, cert.Subject.OrganizationalUnit, cert.ExtKeyUsage, epoch}
	want := struct {
		CN    string
		OU    []string
		EKU   []x509.ExtKeyUsage
		Epoch int64
	}{"node-1", []string{"node"}, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("certificate (-want +got):\n%s", diff)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: p.AgentCAPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("does not chain to the agent CA: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Errorf("verified without the agent CA")
	}
	if run := proto.AgentRun(cert); run != "" {
		t.Errorf("the node certificate names run %q, want none", run)
	}
	// A ramdisk's certificate names its installation too, and the run whose token it
	// joined with; a site agent's its site's epoch.
	for role, want := range map[string]string{joinwire.RoleRamdisk: "3", joinwire.RoleSite: "3"} {
		der, err := p.IssueAgentCertificate(proto.AgentCredential{Node: "node-1", Role: proto.Role(role), Epoch: 3, Run: "wf_" + role}, key.Public())
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil || cert.Subject.SerialNumber != want || proto.AgentRun(cert) != "wf_"+role {
			t.Errorf("a %s certificate's serialNumber and run: %v, want %q and wf_%s", role, err, want, role)
		}
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
	if _, err := LoadOrCreate(dataDir, clock.Real{}); err != nil {
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

// TestCertificatesCarryTheClocksTime checks that the PKI stamps what it makes with the
// registry's clock, as the serving certificate's renewal reads it: the CAs made at the
// clock's start, an agent's and the registry's certificates issued after it moved.
func TestCertificatesCarryTheClocksTime(t *testing.T) {
	start := time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	p, err := LoadOrCreate(t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	for name, ca := range map[string]*x509.Certificate{"serving CA": p.ServingCA, "agent CA": p.AgentCA} {
		if !ca.NotBefore.Equal(start.Add(-time.Hour)) {
			t.Errorf("%s valid from %v, want an hour before the clock's %v", name, ca.NotBefore, start)
		}
	}
	clk.Advance(400 * 24 * time.Hour)
	moved := clk.Now()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := p.IssueAgentCertificate(proto.AgentCredential{Node: "node-1", Role: proto.Role(joinwire.RoleNode), Epoch: 0}, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	agent, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := p.ServerCertificate([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	server, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*x509.Certificate{"agent": agent, "server": server} {
		if !c.NotBefore.Equal(moved.Add(-time.Hour)) {
			t.Errorf("%s certificate valid from %v, want an hour before the moved clock's %v", name, c.NotBefore, moved)
		}
	}
	if _, err := agent.Verify(x509.VerifyOptions{Roots: p.AgentCAPool(), CurrentTime: moved, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("at the clock's time, the agent certificate does not verify: %v", err)
	}
}
