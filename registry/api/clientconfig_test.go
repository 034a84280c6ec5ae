package api

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// servingCAPEM is the PEM of a real certificate, for configs whose servingCA must parse.
func servingCAPEM(t testing.TB) string {
	s := httptest.NewTLSServer(http.NotFoundHandler())
	defer s.Close()
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}))
}

// writeConfig writes data as a CLI config file, owner-only.
func writeConfig(t testing.TB, data []byte) string {
	return writeConfigIn(t, t.TempDir(), data)
}

// writeConfigIn writes data as the CLI config file of dir, owner-only.
func writeConfigIn(t testing.TB, dir string, data []byte) string {
	path := filepath.Join(dir, "cli.conf")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCredentialIsSentOnlyOverTLS: a CLI config whose server is not an https URL (a
// typo of http://, a proxy's address) is refused as it is read, INVALID_CONFIG at
// server, before a call is made: the client would send its bearer credential in the
// clear to whatever answers, trusting no servingCA.
func TestCredentialIsSentOnlyOverTLS(t *testing.T) {
	var bearers atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Authorization"), "bcc_secret") {
			bearers.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	}))
	defer plain.Close()
	host := strings.TrimPrefix(plain.URL, "http://")
	for _, server := range []string{plain.URL, "HTTP://" + host, "//" + host, host, "https://", "https://user:pw@" + host, "https://" + host + "/?x=1"} {
		path := writeConfig(t, EncodeClientConfig(ClientConfig{Server: server, ServingCA: servingCAPEM(t), Credential: "bcc_secret"}))
		cfg, err := LoadClientConfig(path)
		if err == nil {
			if c, err := NewClient(cfg); err == nil {
				c.Call(context.Background(), "credentials.whoami", struct{}{}, nil)
			}
		}
		if err == nil {
			t.Errorf("server %q accepted (the credential reached a plain HTTP server %d times so far), want INVALID_CONFIG at server", server, bearers.Load())
		} else if e := proto.AsError(err); e.Code != proto.InvalidConfig || e.Details.Path != "server" {
			t.Errorf("server %q: %v at %q, want INVALID_CONFIG at server", server, err, e.Details.Path)
		}
	}
	if n := bearers.Load(); n != 0 {
		t.Fatalf("the credential was sent in the clear %d times", n)
	}
}

// FuzzLoadClientConfig reads any CLI config file: an accepted one is version 1 with a
// credential and an https server URL of a host, without user info, query or fragment, to
// which alone the credential is sent; written back, it reads as the same config. A
// refusal is INVALID_CONFIG.
func FuzzLoadClientConfig(f *testing.F) {
	ca := servingCAPEM(f)
	f.Add(EncodeClientConfig(ClientConfig{Server: "https://127.0.0.1:8443", ServingCA: ca, Credential: "bcc_x"}))
	f.Add(EncodeClientConfig(ClientConfig{Server: "https://[::1]:8443/", ServingCA: ca, Credential: "bcc_x"}))
	f.Add(EncodeClientConfig(ClientConfig{Server: "http://registry.example:8443", ServingCA: ca, Credential: "bcc_x"}))
	f.Add([]byte(`{"version":1,"server":"https://r:1","credential":"c","servingCA":"","extra":1}`))
	f.Add([]byte(`{"version":2,"server":"https://r:1","credential":"c"}`))
	f.Add([]byte(`{"version":1,"server":"https://r:1","server":"http://r:1","credential":"c"}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := writeConfigIn(t, dir, data)
		cfg, err := LoadClientConfig(path)
		if err != nil {
			if proto.CodeOf(err) != proto.InvalidConfig {
				t.Fatalf("%q refused with %v, not INVALID_CONFIG", data, err)
			}
			return
		}
		u, err := url.Parse(cfg.Server)
		if cfg.Version != 1 || cfg.Credential == "" || err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil ||
			u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.TrimSuffix(u.Path, "/") != "" {
			t.Fatalf("%q accepted as %+v", data, cfg)
		}
		again, err := LoadClientConfig(writeConfigIn(t, dir, EncodeClientConfig(cfg)))
		if err != nil || !reflect.DeepEqual(again.Server, cfg.Server) || again.Credential != cfg.Credential || again.ServingCA != cfg.ServingCA {
			t.Fatalf("%+v written back reads as %+v, %v", cfg, again, err)
		}
	})
}
