package redfish

import (
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/bmc/redfish/redfishtest"
	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
)

func TestOpenConfig(t *testing.T) {
	e := redfishtest.Start(t, redfishtest.Config{})
	cases := map[string]struct {
		mutate func(c *bmc.Config)
		env    bmc.Env
		path   string
		text   string
	}{
		"unknown option":      {mutate: func(c *bmc.Config) { c.Options["insecure"] = "true" }, path: "options.insecure"},
		"http address":        {mutate: func(c *bmc.Config) { c.Address = "http://" + c.Address }, path: "address"},
		"address with a path": {mutate: func(c *bmc.Config) { c.Address = "https://" + c.Address + "/redfish/v1" }, path: "address"},
		"address with a user": {mutate: func(c *bmc.Config) { c.Address = "https://root@" + c.Address }, path: "address"},
		"empty port":          {mutate: func(c *bmc.Config) { c.Address = "bmc.example:" }, path: "address"},
		"no credential":       {mutate: func(c *bmc.Config) { c.CredentialRef = "" }, path: "credentialRef"},
		"relative credential": {mutate: func(c *bmc.Config) { c.CredentialRef = "bmc.json" }, path: "credentialRef"},
		"no resolver":         {env: bmc.Env{}, path: "credentialRef", text: "no credential resolver"},
		"absolute path":       {mutate: func(c *bmc.Config) { c.CredentialRef = "/etc/shadow" }, path: "credentialRef"},
		"another secret":      {mutate: func(c *bmc.Config) { c.CredentialRef = "secret://rack-1/other" }, path: "credentialRef", text: "carries no credential"},
		"auth":                {mutate: func(c *bmc.Config) { c.Options[optAuth] = "digest" }, path: "options.auth"},
		"boot mode":           {mutate: func(c *bmc.Config) { c.Options[optBootMode] = "UEFI" }, path: "options.bootMode"},
		"power timeout":       {mutate: func(c *bmc.Config) { c.Options["powerTimeout"] = "-1s" }, path: "options.powerTimeout"},
		"poll interval":       {mutate: func(c *bmc.Config) { c.Options["pollInterval"] = "often" }, path: "options.pollInterval"},
		"bad pin":             {mutate: func(c *bmc.Config) { c.Options[optTLSPin] = "sha1/abc" }, path: "options.tlsPin"},
		"pin and CA":          {mutate: func(c *bmc.Config) { c.Options[optCAFile] = "/etc/ssl/certs/ca-certificates.crt" }, path: "options.tlsPin"},
		"missing CA file":     {mutate: func(c *bmc.Config) { delete(c.Options, optTLSPin); c.Options[optCAFile] = "/nonexistent/ca.pem" }, path: "options.caFile"},
		"unknown system":      {mutate: func(c *bmc.Config) { c.Options[optSystem] = "2" }, path: "options.system", text: `no system "2"; it has ` + redfishtest.SystemID},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := sushyConfig(t, e)
			if tc.mutate != nil {
				tc.mutate(&cfg)
			}
			env := bmc.Env{Credentials: sushyLogin}
			if name == "no resolver" {
				env = tc.env
			}
			_, err := Open(context.Background(), cfg, env)
			checkErr(t, err, proto.InvalidConfig, tc.text)
			if got := proto.AsError(err).Details.Path; got != tc.path {
				t.Fatalf("path %q, want %q (%v)", got, tc.path, err)
			}
		})
	}
}

// TestLogin: a BMC that offers sessions (sushy-tools offers none: TestSushyLogin) checks
// the credential, by session (the default) or basic auth; a refusal is DRIVER_ERROR with
// the BMC's message, and the password appears nowhere in it.
func TestLogin(t *testing.T) {
	cases := map[string]struct {
		auth     string
		password string
		message  string
	}{
		"default is a session":    {password: password},
		"session":                 {auth: "session", password: password},
		"basic":                   {auth: "basic", password: password},
		"session, wrong password": {auth: "session", password: "guess", message: "log in as operator: HTTP 401: While attempting to establish a connection to '/redfish/v1/SessionService/Sessions', the service denied access."},
		"basic, wrong password":   {auth: "basic", password: "guess", message: "list systems: /redfish/v1/Systems: HTTP 401: There is no valid session established with the implementation."},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sim := newSim(t, redfishsim.Config{})
			cfg := config(t, sim)
			if tc.auth != "" {
				cfg.Options[optAuth] = tc.auth
			}
			d, err := Open(context.Background(), cfg, bmc.Env{Credentials: attached(tc.password)})
			if tc.message != "" {
				checkErr(t, err, proto.DriverError, tc.message)
				if strings.Contains(err.Error(), tc.password) {
					t.Fatalf("the error shows the password: %v", err)
				}
				return
			}
			checkErr(t, err, "", "")
			if _, err := d.GetPower(context.Background()); err != nil {
				t.Fatal(err)
			}
			sessions := map[string]int{"": 1, "session": 1, "basic": 0}[tc.auth]
			if got := sim.Sessions(); got != sessions {
				t.Fatalf("%d sessions open, want %d", got, sessions)
			}
			d.Close()
			if got := sim.Sessions(); got != 0 {
				t.Fatalf("%d sessions open after Close, want 0", got)
			}
		})
	}
}

// TestTrust: the BMC's certificate is trusted by a CA file or by its key's pin, else
// the driver does not talk to it.
func TestTrust(t *testing.T) {
	e := redfishtest.Start(t, redfishtest.Config{})
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.Certificate.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	otherPin, err := joinwire.Pin(redfishsim.SelfSigned().Leaf.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		options map[string]string
		message string
	}{
		"pin":           {},
		"CA file":       {options: map[string]string{optTLSPin: "", optCAFile: caFile}},
		"system roots":  {options: map[string]string{optTLSPin: ""}, message: "certificate"},
		"another's pin": {options: map[string]string{optTLSPin: otherPin}, message: "does not match option tlsPin"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := sushyConfig(t, e)
			for k, v := range tc.options {
				if v == "" {
					delete(cfg.Options, k)
				} else {
					cfg.Options[k] = v
				}
			}
			d, err := Open(context.Background(), cfg, bmc.Env{Credentials: sushyLogin})
			if tc.message == "" {
				checkErr(t, err, "", "")
				d.Close()
				return
			}
			checkErr(t, err, proto.DriverError, tc.message)
		})
	}
}

// TestServiceRoot: a service root the driver cannot read, before any login, is
// DRIVER_ERROR naming what is wrong, and no credential is sent.
func TestServiceRoot(t *testing.T) {
	cases := map[string]struct {
		status  int
		body    string
		message string
	}{
		"unavailable":   {status: http.StatusServiceUnavailable, body: "<html>busy</html>", message: "read the service root: HTTP 503: Service Unavailable"},
		"not JSON":      {status: http.StatusOK, body: "<html>login</html>", message: "GET /redfish/v1/ answered a body beginning '<', not a Redfish resource"},
		"not an object": {status: http.StatusOK, body: `["Links"]`, message: "GET /redfish/v1/ answered a body beginning '[', not a Redfish resource"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var authorized atomic.Bool
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "" {
					authorized.Store(true)
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			cfg := pinned(t, strings.TrimPrefix(srv.URL, "https://"), srv.Certificate().PublicKey, "10ms", "1s")
			_, err := Open(context.Background(), cfg, bmc.Env{Credentials: credentials})
			checkErr(t, err, proto.DriverError, tc.message)
			if authorized.Load() {
				t.Fatal("the driver sent a credential")
			}
		})
	}
}
