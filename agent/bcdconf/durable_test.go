package bcdconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/crashpoint"
)

// joined is a join's bundle for node, from a registry of its own: its certificate is
// issued by a new CA, which is both the agent CA and the serving CA.
func joined(t *testing.T, node string) (Bundle, tls.Certificate) {
	t.Helper()
	ca, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.AgentCertificate(node, "node")
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate().Raw})
	conf := sample()
	conf.NodeID = node
	return Bundle{Config: conf, Key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}),
		Certificate: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		AgentCA:     caPEM, ServingCA: caPEM, JoinEncryptionKey: []byte("{}\n")}, cert
}

// TestJoinWriteChild is the child of TestNewConfigDirIsSynced and TestRejoinKilled: it
// writes node-2's join into the directory its parent names, as `bcd join` does.
func TestJoinWriteChild(t *testing.T) {
	b, _ := joined(t, "node-2")
	if err := Write(crashpoint.Child(t), b); err != nil {
		t.Fatal(err)
	}
}

// TestNewConfigDirIsSynced: a join into a configuration directory that does not exist
// yet survives a power loss once `bcd join` reports it: the directory (and its parent
// it made) is fsynced in its parent, not only the files in it. A host that lost it would
// boot unjoined, with the join's token spent.
func TestNewConfigDirIsSynced(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etc", "bcd")
	calls := crashpoint.Trace(t, "TestJoinWriteChild", dir)
	for _, path := range []string{filepath.Dir(dir), dir, filepath.Join(dir, KeyFile), filepath.Join(dir, bcdargv.ConfigFile)} {
		crashpoint.SyncedDir(t, calls, path)
	}
}

// TestRejoinKilled kills a join (in a child) written over the directory of an earlier
// one, of another node from another registry, at each of its writes and fsyncs. What the
// next start loads is one join whole, the key, the certificate, the config and the
// serving CA all of it; or the start refuses, saying to join again. Never a key beside
// the other join's certificate, which TLS refuses without saying what to do, nor a
// certificate of one join with the config of the other.
func TestRejoinKilled(t *testing.T) {
	first, _ := joined(t, "node-1")
	fresh := func() string {
		dir := t.TempDir()
		if err := Write(dir, first); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	kills := crashpoint.EachKill(t, "TestJoinWriteChild", fresh, func(dir, call string, n int) {
		a, err := LoadAgent(dir)
		if err != nil {
			if !strings.Contains(err.Error(), "run `bcd join` again") {
				t.Errorf("killed at %s #%d, the next start: %v; want it to say to join again", call, n, err)
			}
			return
		}
		leaf, err := x509.ParseCertificate(a.Certificate.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if leaf.Subject.CommonName != a.Config.NodeID {
			t.Errorf("killed at %s #%d, the next start loads node %s's certificate with node %s's config", call, n, leaf.Subject.CommonName, a.Config.NodeID)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: a.ServingCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("killed at %s #%d, the next start loads a certificate of the other join's registry: %v", call, n, err)
		}
	})
	if kills < 6 {
		t.Fatalf("the child was killed %d times", kills)
	}
}

// TestRejoinReplacesACutShortRenewal: a join over the directory of an earlier one where
// a renewal's save was cut short (agent.renewed.pem left, which the start prefers) loads
// the new join's certificate, not the earlier join's renewed one.
func TestRejoinReplacesACutShortRenewal(t *testing.T) {
	dir := t.TempDir()
	first, _ := joined(t, "node-1")
	if err := Write(dir, first); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, RenewedFile), append(append([]byte{}, first.Key...), first.Certificate...), 0o600); err != nil {
		t.Fatal(err)
	}
	second, cert := joined(t, "node-2")
	if err := Write(dir, second); err != nil {
		t.Fatal(err)
	}
	a, err := LoadAgent(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(a.Certificate.Certificate[0]) != string(cert.Certificate[0]) {
		t.Errorf("after the join the start loads the earlier join's renewed certificate")
	}
}
