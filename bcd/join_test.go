package main_test

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
)

// joiner is one machine about to run `bcd join`: its config dir and token file.
type joiner struct {
	configDir, tokenFile string
}

func newJoiner(t *testing.T, token string) joiner {
	t.Helper()
	dir := t.TempDir()
	j := joiner{configDir: filepath.Join(dir, "etc-bcd"), tokenFile: filepath.Join(dir, "join-token")}
	if err := os.WriteFile(j.tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return j
}

func (j joiner) args(server, nodeID, role string, pins joinwire.Pins) []string {
	args := []string{"join", "--server", server, "--token-file", j.tokenFile, "--node-id", nodeID, "--role", role, "--config-dir", j.configDir}
	for _, p := range []struct{ flag, pin string }{
		{"--serving-ca-pin", pins.ServingCA}, {"--join-signing-pin", pins.JoinSigning}, {"--join-encryption-pin", pins.JoinEncryption},
	} {
		if p.pin != "" {
			args = append(args, p.flag, p.pin)
		}
	}
	return args
}

// mint makes a join token through the CLI and returns its secret.
func mint(t *testing.T, reg *testkit.Registry, args ...string) string {
	t.Helper()
	var made struct{ Token string }
	testkit.JSON(t, reg.AdminConfig, &made, append([]string{"tokens", "create"}, args...)...)
	if !strings.HasPrefix(made.Token, "bcj_") {
		t.Fatalf("minted %+v", made)
	}
	return made.Token
}

func otherPin(t *testing.T) string {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	pin, err := joinwire.Pin(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pin
}

func TestJoinWritesConfigAndRemovesToken(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	testkit.JSON(t, reg.AdminConfig, nil, "sites", "create", "rack-a")
	j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "node-1", "--site", "rack-a"))
	res := testkit.BCD(t, j.args(reg.URL, "node-1", "node", reg.Pins)...)
	if res.Code != 0 {
		t.Fatalf("bcd join: exit %d\n%s", res.Code, res.Stderr)
	}
	if _, err := os.Stat(j.tokenFile); !os.IsNotExist(err) {
		t.Errorf("token file after join: %v, want it removed", err)
	}
	modes := map[string]os.FileMode{}
	entries, _ := os.ReadDir(j.configDir)
	for _, e := range entries {
		info, _ := e.Info()
		modes[e.Name()] = info.Mode().Perm()
	}
	want := map[string]os.FileMode{"config.toml": 0o644, "agent.key": 0o600, "agent.crt": 0o644, "agent-ca.crt": 0o644, "serving-ca.crt": 0o644, "join-encryption.jwk": 0o644, ".join.lock": 0o600}
	if diff := cmp.Diff(want, modes); diff != "" {
		t.Errorf("config dir (-want +got):\n%s", diff)
	}
	cfg, err := bcdconf.Load(j.configDir)
	if err != nil {
		t.Fatal(err)
	}
	wantCfg := bcdconf.Config{Version: 1, Server: reg.URL, AgentEndpoint: reg.AgentEndpoint, NodeID: "node-1", Role: "node", Site: "rack-a",
		ServingCAPin: reg.Pins.ServingCA, JoinSigningPin: reg.Pins.JoinSigning, JoinEncryptionPin: reg.Pins.JoinEncryption}
	if diff := cmp.Diff(wantCfg, cfg); diff != "" {
		t.Errorf("config.toml (-want +got):\n%s", diff)
	}
	cert := readCert(t, filepath.Join(j.configDir, "agent.crt"))
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, filepath.Join(j.configDir, "agent-ca.crt")))
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("agent.crt does not chain to agent-ca.crt: %v", err)
	}
	if cert.Subject.CommonName != "node-1" || !cmp.Equal(cert.Subject.OrganizationalUnit, []string{"node"}) {
		t.Errorf("agent.crt names %v", cert.Subject)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(j.configDir, "agent.crt"), filepath.Join(j.configDir, "agent.key"))
	if err != nil || pair.PrivateKey == nil {
		t.Errorf("agent.key does not match agent.crt: %v", err)
	}

	var list struct {
		Tokens []struct {
			NodeID, Kind string
			UsedAt       time.Time
		}
	}
	testkit.JSON(t, reg.AdminConfig, &list, "tokens", "list")
	if len(list.Tokens) != 1 || list.Tokens[0].UsedAt.IsZero() {
		t.Errorf("tokens after the join: %+v", list)
	}

	// The ramdisk installs join-encryption.jwk into the OS it writes; a later join with
	// a provisioned token uses it.
	next := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "node-1"))
	os.MkdirAll(next.configDir, 0o700)
	jwk, _ := os.ReadFile(filepath.Join(j.configDir, "join-encryption.jwk"))
	os.WriteFile(filepath.Join(next.configDir, "join-encryption.jwk"), jwk, 0o644)
	if res := testkit.BCD(t, next.args(reg.URL, "node-1", "node", reg.Pins)...); res.Code != 0 {
		t.Fatalf("join with an installed join-encryption.jwk: exit %d\n%s", res.Code, res.Stderr)
	}
}

func TestJoinRefuses(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	testkit.JSON(t, reg.AdminConfig, nil, "sites", "create", "rack-b")
	forged := forgedDocumentServer(t, reg)
	foreignTLS := foreignTLSServer(t, reg)
	encKey, _ := ecdh.X25519().GenerateKey(rand.Reader)
	cases := map[string]struct {
		// setup mints what it needs and returns the joiner and bcd's flags.
		setup func(t *testing.T) (joiner, []string)
		// stderr must contain each of these.
		stderr []string
		// extra are files a case put into the config dir itself.
		extra []string
		// usage: bcd's command line is wrong (a pin flag left out), exit 2; else exit 1.
		usage bool
	}{
		"second use of a token": {
			setup: func(t *testing.T) (joiner, []string) {
				token := mint(t, reg, "--kind", "provisioned", "--node-id", "n-used")
				first := newJoiner(t, token)
				if res := testkit.BCD(t, first.args(reg.URL, "n-used", "node", reg.Pins)...); res.Code != 0 {
					t.Fatalf("first join: %s", res.Stderr)
				}
				j := newJoiner(t, token)
				return j, j.args(reg.URL, "n-used", "node", reg.Pins)
			},
			stderr: []string{"UNAUTHENTICATED", "already used", "token-used"},
		},
		"expired token": {
			setup: func(t *testing.T) (joiner, []string) {
				j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "n-late", "--ttl", "1s"))
				time.Sleep(1100 * time.Millisecond)
				return j, j.args(reg.URL, "n-late", "node", reg.Pins)
			},
			stderr: []string{"UNAUTHENTICATED", "expired", "token-expired"},
		},
		"another node id": {
			setup: func(t *testing.T) (joiner, []string) {
				j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "n-right"))
				return j, j.args(reg.URL, "n-wrong", "node", reg.Pins)
			},
			stderr: []string{"FORBIDDEN", `minted for node "n-right"`, `"n-wrong"`},
		},
		"site token as a node": {
			setup: func(t *testing.T) (joiner, []string) {
				j := newJoiner(t, mint(t, reg, "--kind", "site", "--site", "rack-b"))
				return j, j.args(reg.URL, "rack-b", "node", reg.Pins)
			},
			stderr: []string{"FORBIDDEN", "a site token, which joins role site, not node"},
		},
		"wrong serving CA pin": {
			setup: func(t *testing.T) (joiner, []string) {
				j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "n1"))
				pins := reg.Pins
				pins.ServingCA = otherPin(t)
				return j, j.args(reg.URL, "n1", "node", pins)
			},
			stderr: []string{"--serving-ca-pin does not match the serving CA"},
		},
		"wrong join signing pin": {
			setup: func(t *testing.T) (joiner, []string) {
				j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "n1"))
				pins := reg.Pins
				pins.JoinSigning = otherPin(t)
				return j, j.args(reg.URL, "n1", "node", pins)
			},
			stderr: []string{"--join-signing-pin does not match the join signing key"},
		},
		"wrong join encryption pin": {
			setup: func(t *testing.T) (joiner, []string) {
				j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "n1"))
				pins := reg.Pins
				pins.JoinEncryption = otherPin(t)
				return j, j.args(reg.URL, "n1", "node", pins)
			},
			stderr: []string{"--join-encryption-pin does not match the join encryption key"},
		},
		"missing serving CA pin": {
			setup: func(t *testing.T) (joiner, []string) {
				j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "n1"))
				pins := reg.Pins
				pins.ServingCA = ""
				return j, j.args(reg.URL, "n1", "node", pins)
			},
			stderr: []string{"bcd join needs --serving-ca-pin", "at: --serving-ca-pin"},
			usage:  true,
		},
		"missing join signing pin": {
			setup: func(t *testing.T) (joiner, []string) {
				j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "n1"))
				pins := reg.Pins
				pins.JoinSigning = ""
				return j, j.args(reg.URL, "n1", "node", pins)
			},
			stderr: []string{"bcd join needs --join-signing-pin", "at: --join-signing-pin"},
			usage:  true,
		},
		"missing join encryption pin": {
			setup: func(t *testing.T) (joiner, []string) {
				j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "n1"))
				pins := reg.Pins
				pins.JoinEncryption = ""
				return j, j.args(reg.URL, "n1", "node", pins)
			},
			stderr: []string{"bcd join needs --join-encryption-pin", "at: --join-encryption-pin"},
			usage:  true,
		},
		"forged document with another CA": {
			setup: func(t *testing.T) (joiner, []string) {
				j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "n1"))
				return j, j.args(forged, "n1", "node", reg.Pins)
			},
			stderr: []string{"--serving-ca-pin does not match the serving CA"},
		},
		"genuine document behind another CA's certificate": {
			setup: func(t *testing.T) (joiner, []string) {
				j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "n1"))
				return j, j.args(foreignTLS, "n1", "node", reg.Pins)
			},
			stderr: []string{"does not chain to the pinned serving CA", "server-certificate"},
		},
		"installed join-encryption.jwk not matching the pin": {
			setup: func(t *testing.T) (joiner, []string) {
				j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "n1"))
				os.MkdirAll(j.configDir, 0o700)
				data := []byte(`{"kty":"OKP","crv":"X25519","x":"` + joinwire.NewJWK(encKey.PublicKey()).X + `"}`)
				os.WriteFile(filepath.Join(j.configDir, "join-encryption.jwk"), data, 0o644)
				return j, j.args(reg.URL, "n1", "node", reg.Pins)
			},
			stderr: []string{"join-encryption.jwk does not match --join-encryption-pin"},
			extra:  []string{"join-encryption.jwk"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			j, args := tc.setup(t)
			res := testkit.BCD(t, args...)
			want := 1
			if tc.usage {
				want = 2
			}
			if res.Code != want {
				t.Fatalf("bcd join: exit %d, want %d\nstdout: %s\nstderr: %s", res.Code, want, res.Stdout, res.Stderr)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(res.Stderr, s) {
					t.Errorf("stderr does not say %q:\n%s", s, res.Stderr)
				}
			}
			assertNothingWritten(t, j, tc.extra)
		})
	}
}

func TestJoinRaceAdmitsExactlyOne(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	token := mint(t, reg, "--kind", "ramdisk", "--node-id", "n-race")
	joiners := []joiner{newJoiner(t, token), newJoiner(t, token), newJoiner(t, token)}
	results := make([]testkit.Result, len(joiners))
	var wg sync.WaitGroup
	for i, j := range joiners {
		wg.Go(func() { results[i] = testkit.BCD(t, j.args(reg.URL, "n-race", "ramdisk", reg.Pins)...) })
	}
	wg.Wait()
	admitted := 0
	for i, res := range results {
		switch res.Code {
		case 0:
			admitted++
		case 1:
			if !strings.Contains(res.Stderr, "token-used") {
				t.Errorf("a loser said: %s", res.Stderr)
			}
			assertNothingWritten(t, joiners[i], nil)
		default:
			t.Errorf("exit %d: %s", res.Code, res.Stderr)
		}
	}
	if admitted != 1 {
		t.Fatalf("%d of %d racing joins admitted with one token, want exactly 1", admitted, len(joiners))
	}
}

// assertNothingWritten checks that a refused join left the token file and wrote
// nothing into the config dir beyond the files the case put there.
func assertNothingWritten(t *testing.T, j joiner, extra []string) {
	t.Helper()
	if _, err := os.Stat(j.tokenFile); err != nil {
		t.Errorf("token file after a refused join: %v", err)
	}
	var names []string
	entries, err := os.ReadDir(j.configDir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff(extra, names); diff != "" {
		t.Errorf("config dir after a refused join (-want +got):\n%s", diff)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := joinwire.ParseCertificatePEM(string(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cert
}

// forgedDocumentServer serves a well-known document naming its own CA (what a DNS
// takeover with a Web PKI certificate could serve), with the real registry's other keys.
func forgedDocumentServer(t *testing.T, reg *testkit.Registry) string {
	t.Helper()
	var doc joinwire.WellKnown
	genuine := fetchDocument(t, reg)
	if err := json.Unmarshal(genuine, &doc); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(nil)
	doc.ServingCA = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	body, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) })
	t.Cleanup(srv.Close)
	return srv.URL
}

// foreignTLSServer serves the registry's genuine document behind a certificate of
// another CA.
func foreignTLSServer(t *testing.T, reg *testkit.Registry) string {
	t.Helper()
	body := fetchDocument(t, reg)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

// fetchDocument gets the registry's well-known document, trusting its serving CA.
func fetchDocument(t *testing.T, reg *testkit.Registry) []byte {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(reg.DataDir, "pki", "serving-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := client.Get(reg.URL + joinwire.WellKnownPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("well-known document: %s, %v", resp.Status, err)
	}
	return body
}

// front stands in front of the registry with a certificate of its serving CA, as a NAT
// gateway or a load balancer would, its connections to the registry from the loopback
// address local: serve answers each request, passing it on to next as it will. It
// returns its URL.
func front(t *testing.T, reg *testkit.Registry, local string, serve func(w http.ResponseWriter, r *http.Request, next http.Handler)) string {
	t.Helper()
	ca := readCert(t, filepath.Join(reg.DataDir, "pki", "serving-ca.crt"))
	keyPEM, err := os.ReadFile(filepath.Join(reg.DataDir, "pki", "serving-ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	caKey, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(7), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		ca, leafKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(reg.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transportFrom(t, reg, local)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serve(w, r, proxy) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// transportFrom reaches the registry over TLS verified against its serving CA, its
// connections from the loopback address local ("" for the system's choice).
func transportFrom(t *testing.T, reg *testkit.Registry, local string) *http.Transport {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, filepath.Join(reg.DataDir, "pki", "serving-ca.crt")))
	dialer := &net.Dialer{}
	if local != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DialContext: dialer.DialContext}
}

// busyFront is a front that answers the first busy join.join calls as a registry serving
// as many joins as it takes at once does, and passes everything else through. It returns
// its URL and the number of join.join calls it has seen.
func busyFront(t *testing.T, reg *testkit.Registry, busy int) (string, func() int) {
	t.Helper()
	var mu sync.Mutex
	joins := 0
	u := front(t, reg, "", func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if r.URL.Path == "/v1/"+joinwire.JoinMethod {
			mu.Lock()
			joins++
			n := joins
			mu.Unlock()
			if n <= busy {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"code":"UNAVAILABLE","message":"the registry is serving as many join.join calls as it takes at once: try again in 1 s"}`))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
	return u, func() int { mu.Lock(); defer mu.Unlock(); return joins }
}

func TestJoinWaitsOutABusyRegistry(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	testkit.JSON(t, reg.AdminConfig, nil, "sites", "create", "rack-a")
	front, joins := busyFront(t, reg, 2)
	j := newJoiner(t, mint(t, reg, "--kind", "provisioned", "--node-id", "node-1", "--site", "rack-a"))
	if res := testkit.BCD(t, j.args(front, "node-1", "node", reg.Pins)...); res.Code != 0 {
		t.Fatalf("bcd join through a busy registry: exit %d\n%s", res.Code, res.Stderr)
	}
	if n := joins(); n != 3 {
		t.Errorf("bcd join sent %d join requests, want 3 (two answered UNAVAILABLE)", n)
	}
	if _, err := bcdconf.Load(j.configDir); err != nil {
		t.Errorf("after the join: %v", err)
	}
}

// TestJoinTellsAScriptInJSON: `bcd join --format json` prints what it joined as one JSON
// object on standard output (the node, its role, the directory it wrote), and a refusal
// as the error object there, nothing on stderr: a usage error at its flag (exit 2) and
// a token already spent (exit 1); a --format it does not know is a usage error as text. Before, bcd had no --format: a script read sentences.
func TestJoinTellsAScriptInJSON(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	testkit.JSON(t, reg.AdminConfig, nil, "sites", "create", "rack-a")
	secret := mint(t, reg, "--kind", "provisioned", "--node-id", "node-1", "--site", "rack-a")
	j := newJoiner(t, secret)
	args := append(j.args(reg.URL, "node-1", "node", reg.Pins), "--format", "json")
	res := testkit.BCD(t, args...)
	var joined struct{ NodeID, Role, ConfigDir string }
	if err := json.Unmarshal([]byte(res.Stdout), &joined); err != nil || res.Code != 0 ||
		joined != (struct{ NodeID, Role, ConfigDir string }{"node-1", "node", j.configDir}) {
		t.Errorf("bcd join --format json: exit %d, %+v (%v)\n%s%s", res.Code, joined, err, res.Stdout, res.Stderr)
	}
	for _, c := range []struct {
		name       string
		args       []string
		code       int
		want, path string
	}{
		{"no --server", append([]string{"join", "--format", "json"}, args[3:len(args)-2]...), 2, "INVALID_INPUT", "--server"},
		{"the token spent", args, 1, "", ""},
	} {
		if err := os.WriteFile(j.tokenFile, []byte(secret+"\n"), 0o600); err != nil { // the join removed it
			t.Fatal(err)
		}
		res := testkit.BCD(t, c.args...)
		var e testkit.ErrorObject
		err := json.Unmarshal([]byte(res.Stdout), &e)
		if res.Code != c.code || err != nil || e.Code == "" || c.want != "" && e.Code != c.want || e.Details.Path != c.path || res.Stderr != "" {
			t.Errorf("%s: exit %d, stdout %q (%v), stderr %q; want exit %d and the error object %s at %q on stdout alone", c.name, res.Code, res.Stdout, err, res.Stderr, c.code, c.want, c.path)
		}
	}
	// A format it does not print is a usage error said as text: no JSON was asked for.
	if res := testkit.BCD(t, append(args[:len(args)-1:len(args)-1], "yaml")...); res.Code != 2 || !strings.Contains(res.Stderr, "INVALID_INPUT") || !strings.Contains(res.Stderr, "at: --format") {
		t.Errorf("--format yaml: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}
