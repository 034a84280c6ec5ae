package agentplane

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// TestServeAcceptsAgents starts the real `better-compute serve`: its agent endpoint
// presents a certificate from the serving CA and accepts a certificate from the agent CA
// in its data directory, and only that one.
func TestServeAcceptsAgents(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	if reg.AgentEndpoint == "" {
		t.Fatal("serve printed no agent address")
	}
	agentCA, serving := servePKI(t, reg)
	other, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		ca       *testkit.CA
		accepted bool
	}{
		"agent CA":   {ca: agentCA, accepted: true},
		"another CA": {ca: other},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cert, err := tc.ca.AgentCertificate("gpu-1", string(proto.RoleNode))
			if err != nil {
				t.Fatal(err)
			}
			conf := &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: serving, ServerName: "127.0.0.1", NextProtos: []string{proto.AgentALPN}}
			err = dialRefused(reg.AgentEndpoint, conf)
			if accepted := err == nil; accepted != tc.accepted {
				t.Fatalf("accepted %v (%v), want %v", accepted, err, tc.accepted)
			}
		})
	}
}

// servePKI returns the agent CA of a running `serve` (from its data directory) and the
// pool of its serving CA, for agents made up by a test.
func servePKI(t testing.TB, reg *testkit.Registry) (*testkit.CA, *x509.CertPool) {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(reg.DataDir, "pki", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	agentCA, err := testkit.LoadCA(read("agent-ca.crt"), read("agent-ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := api.LoadClientConfig(reg.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	serving := x509.NewCertPool()
	serving.AppendCertsFromPEM([]byte(admin.ServingCA))
	return agentCA, serving
}
