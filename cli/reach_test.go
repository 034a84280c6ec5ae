package cli_test

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// configFor writes a copy of the CLI config at from with its server set to server.
func configFor(t *testing.T, from, server string) string {
	t.Helper()
	cfg, err := api.LoadClientConfig(from)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server = server
	path := filepath.Join(t.TempDir(), "cli.conf")
	if err := api.WriteClientConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	return path
}

func sha256Hex(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// TestUnreachableRegistryIsUnavailable: a registry that refuses the connection, one that
// accepts it but never answers, and an admin socket that is not there are UNAVAILABLE
// (exit 1), saying where the CLI looked and what to do, never INTERNAL.
func TestUnreachableRegistryIsUnavailable(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "https://" + closed.Addr().String()
	closed.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() { // accepts, and never says a word
		var held []net.Conn
		for {
			c, err := silent.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	mute := "https://" + silent.Addr().String()
	noSocket := t.TempDir()

	for name, tc := range map[string]struct {
		config string
		args   []string
		says   []string
	}{
		"connection refused": {configFor(t, reg.AdminConfig, refused), []string{"tenants", "list"},
			[]string{refused, "connection refused", "is `better-compute serve` running there"}},
		"no answer": {configFor(t, reg.AdminConfig, mute), []string{"tenants", "list"},
			[]string{"no answer in time from the registry at " + mute, "is `better-compute serve` running there"}},
		"no admin socket": {"", []string{"signers", "list", "--data-dir", noSocket},
			[]string{filepath.Join(noSocket, "admin.sock"), "--data-dir " + noSocket}},
	} {
		t.Run(name, func(t *testing.T) {
			e := testkit.Fails(t, tc.config, tc.args...)
			if e.Code != "UNAVAILABLE" {
				t.Errorf("%+v, want UNAVAILABLE", e)
			}
			for _, s := range tc.says {
				if !strings.Contains(e.Message, s) {
					t.Errorf("the message does not say %q: %s", s, e.Message)
				}
			}
			if name == "no answer" {
				return // the table says the same, after another 10 s
			}
			if res := testkit.CLI(t, tc.config, tc.args...); res.Code != 1 || !strings.HasPrefix(res.Stderr, "error: UNAVAILABLE: ") {
				t.Errorf("as a table: exit %d, stderr %q", res.Code, res.Stderr)
			}
		})
	}
}

// TestTLSMismatchNamesBothCertificates points one registry's admin.conf at another
// registry: the CLI refuses the server (the config's CA does not sign it) with
// INVALID_CONFIG at servingCA, naming the config file, the server's certificate (subject,
// issuer, fingerprint) and the CA's, and does not ask whether serve is running, since it
// is.
func TestTLSMismatchNamesBothCertificates(t *testing.T) {
	mine := testkit.StartRegistry(t, "")
	other := testkit.StartRegistry(t, "")
	config := configFor(t, mine.AdminConfig, other.URL)

	u, _ := url.Parse(other.URL)
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	cfg, _ := api.LoadClientConfig(config)
	block, _ := pem.Decode([]byte(cfg.ServingCA))
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	e := testkit.Fails(t, config, "tenants", "list")
	if e.Code != "INVALID_CONFIG" || e.Details.Path != "servingCA" {
		t.Errorf("%+v, want INVALID_CONFIG at servingCA", e)
	}
	for _, s := range []string{config, other.URL, leaf.Subject.String(), leaf.Issuer.String(), sha256Hex(leaf.Raw), sha256Hex(ca.Raw)} {
		if !strings.Contains(e.Message, s) {
			t.Errorf("the message does not say %q: %s", s, e.Message)
		}
	}
	if strings.Contains(e.Message, "running") {
		t.Errorf("the message asks whether serve is running, while it is: %s", e.Message)
	}
	testkit.JSON(t, mine.AdminConfig, nil, "tenants", "list") // the config, pointed right, works
}
