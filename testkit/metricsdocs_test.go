package testkit

import (
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	agentmetrics "github.com/better-compute/better-compute/agent/metrics"
	"github.com/better-compute/better-compute/cache"
	"github.com/better-compute/better-compute/hostconverge"
	"github.com/better-compute/better-compute/registry/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// TestDocsNameOnlyRealMetrics: every metric name the operations page, the alerting rules
// and the Grafana dashboard use is one the registry, bcd site or bcd node exports (a
// histogram's _bucket, _count and _sum included), and the operations page's reference
// names every metric they export.
func TestDocsNameOnlyRealMetrics(t *testing.T) {
	reg := metrics.New(metrics.Sources{
		NodesByState:  func() (map[string]int, error) { return map[string]int{"ready": 1}, nil },
		Sites:         func() (int, error) { return 1, nil },
		AgentSessions: func() map[string]int { return map[string]int{"site": 1} },
		Handshakes:    func() (int64, int64, int64) { return 1, 1, 1 },
		Pushes:        func() (int64, int64, int64) { return 1, 1, 1 },
		Log:           slog.New(slog.DiscardHandler),
	})
	reg.APIRequest("metal.get", "OK", time.Millisecond)
	reg.StepEnded("deploy.deploy", "succeeded", time.Second)
	reg.WorkflowEnded("deploy", "custom", "succeeded", time.Second)
	reg.DeployStreamed("cache", 1, 1)
	site := agentmetrics.NewSite(func() cache.Usage { return cache.Usage{} }, func() bool { return true })
	site.DHCPReply("offer")
	site.TFTPTransfer(true, 1)
	site.HTTPServed("image", 200, 1)
	site.ImageRequested(true)
	site.PullEnded("ready")
	node := agentmetrics.NewNode(func() bool { return true })
	node.Pass([]hostconverge.UnitResult{{Unit: "kernel.sysctl", Status: hostconverge.Changed}, {Unit: "kernel.sysctl", Status: hostconverge.Failed}})
	exported := map[string]bool{}
	for _, g := range []prometheus.Gatherer{reg.Gatherer(), site.Gatherer(), node.Gatherer()} {
		families, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if name := f.GetName(); strings.HasPrefix(name, "better_compute_") || strings.HasPrefix(name, "bcd_") {
				exported[name] = true
			}
		}
	}
	names := regexp.MustCompile(`\b(better_compute|bcd)_[a-z_]+[a-z]\b`)
	var page string
	for _, doc := range []string{"docs/operations.md", "examples/prometheus/alerts.yml", "examples/grafana/better-compute.json"} {
		data, err := os.ReadFile(filepath.Join(moduleRoot(), doc))
		if err != nil {
			t.Fatal(err)
		}
		if doc == "docs/operations.md" {
			page = string(data)
		}
		for _, name := range names.FindAllString(string(data), -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				base = strings.TrimSuffix(base, suffix)
			}
			if !exported[name] && !exported[base] {
				t.Errorf("%s names %s, which nothing exports", doc, name)
			}
		}
	}
	for name := range exported {
		if !strings.Contains(page, "`"+name+"`") {
			t.Errorf("docs/operations.md does not describe %s", name)
		}
	}
}
