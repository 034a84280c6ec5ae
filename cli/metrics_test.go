package cli_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// TestMetricsListenerServesOnlyMetricsWithNothingSecret: `serve --metrics-listen` answers
// GET /metrics without a credential on its own listener, and nothing else there (the
// API is not reachable through it); what it shows names no tenant, node or credential,
// and carries no secret: after a tenant, a credential and an enrolled node exist, none
// of their ids nor the credential's secret appear, while the node is counted by state.
func TestMetricsListenerServesOnlyMetricsWithNothingSecret(t *testing.T) {
	reg := testkit.StartRegistry(t, "", "--metrics-listen", "127.0.0.1:0")
	if !strings.HasPrefix(reg.MetricsURL, "http://127.0.0.1:") || !strings.HasSuffix(reg.MetricsURL, "/metrics") {
		t.Fatalf("metrics URL %q", reg.MetricsURL)
	}
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "127.0.0.2/32")
	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	testkit.JSON(t, admin, nil, "pools", "create", "gpu", "--site", "rack-a", "--tenant", "acme")
	conf := filepath.Join(t.TempDir(), "acme.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:nodes:manage,compute:nodes:read", "--out", conf)
	var node store.Node
	testkit.JSON(t, conf, &node, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish", "--bmc-address", "https://127.0.0.2")

	samples, text := testkit.Scrape(t, reg.MetricsURL)
	if samples[`better_compute_nodes{state="enrolling"}`] != 1 || samples[`better_compute_sites`] != 1 ||
		samples[`better_compute_api_requests_total{code="OK",method="metal.enroll"}`] != 1 {
		t.Errorf("the metrics do not show the enrolled node, the site and the call that enrolled it:\n%s", text)
	}
	if n, ok := samples[`better_compute_nodes{state="retired"}`]; !ok || n != 0 {
		t.Errorf("a state no node is in is %v (shown: %v), want 0", n, ok)
	}
	secrets := []string{node.ID, "acme"}
	for _, c := range []string{admin, conf} {
		cfg, err := api.LoadClientConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, cfg.Credential)
		if id, _, ok := strings.Cut(cfg.Credential, "."); ok {
			secrets = append(secrets, id)
		}
	}
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("/metrics shows %q", s)
		}
	}
	base := strings.TrimSuffix(reg.MetricsURL, "/metrics")
	for _, path := range []string{"/", "/v1/metal.list", "/.well-known/better-compute", "/debug/pprof/"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s on the metrics listener: %s, want 404", path, resp.Status)
		}
	}
}
