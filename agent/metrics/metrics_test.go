package metrics

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/cache"
	"github.com/better-compute/better-compute/hostconverge"
	"github.com/better-compute/better-compute/proto"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func fullSite() *Site {
	s := NewSite(func() cache.Usage { return cache.Usage{UsedBytes: 900, CapacityBytes: 1000, Pulling: 1} }, func() int64 { return 800 }, func() bool { return true })
	s.DHCPReply("offer")
	s.DHCPDropped()
	s.DHCPPoolExhausted()
	s.DHCPUnknownRefused()
	s.DHCPAddressInUse()
	s.DHCPCheckUnsent()
	s.DHCPHeldAwayShare()
	s.TFTPTransfer(true, 100)
	s.HTTPServed("image", 206, 1000)
	s.ImageRequested(true)
	s.PullProgress(10)
	s.PullEnded("ready")
	s.Evicted(50)
	return s
}

func fullNode() *Node {
	n := NewNode(func() bool { return false })
	n.Pass([]hostconverge.UnitResult{{Unit: "kernel.sysctl", Status: hostconverge.Changed},
		{Unit: "nvidia.driver", Status: hostconverge.Failed, Code: proto.Unavailable}, {Unit: "kernel.modules", Status: hostconverge.Converged}})
	return n
}

// TestMetricsPassTheLint: promlint finds nothing to say of bcd site's and bcd node's
// metrics.
func TestMetricsPassTheLint(t *testing.T) {
	for name, g := range map[string]prometheus.Gatherer{"site": fullSite().Gatherer(), "node": fullNode().Gatherer()} {
		problems, err := testutil.GatherAndLint(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s: %s", name, p.Metric, p.Text)
		}
	}
}

// TestAPassCountsItsUnits: a pass with a failed unit is a failed pass, and each unit
// that changed the host or failed is counted under its unit.
func TestAPassCountsItsUnits(t *testing.T) {
	want := `
# HELP bcd_hostconverge_changes_total Units that corrected the host in a pass (changed, or rebootRequired), by unit.
# TYPE bcd_hostconverge_changes_total counter
bcd_hostconverge_changes_total{unit="kernel.sysctl"} 1
# HELP bcd_hostconverge_failures_total Units that failed in a pass, by unit and code.
# TYPE bcd_hostconverge_failures_total counter
bcd_hostconverge_failures_total{code="UNAVAILABLE",unit="nvidia.driver"} 1
# HELP bcd_hostconverge_passes_total Host converger passes, by result (applied: no unit failed, failed).
# TYPE bcd_hostconverge_passes_total counter
bcd_hostconverge_passes_total{result="failed"} 1
# HELP bcd_session_connected 1 while the agent holds its session with the registry, else 0.
# TYPE bcd_session_connected gauge
bcd_session_connected 0
`
	if err := testutil.GatherAndCompare(fullNode().Gatherer(), strings.NewReader(want), "bcd_hostconverge_changes_total",
		"bcd_hostconverge_failures_total", "bcd_hostconverge_passes_total", "bcd_session_connected"); err != nil {
		t.Error(err)
	}
}

// TestServeAnswersMetricsOnly: /metrics answers without a credential; nothing else is
// served, and an address taken is INVALID_CONFIG naming the config field.
func TestServeAnswersMetricsOnly(t *testing.T) {
	addr, stop, err := Serve("127.0.0.1:0", "metricsListen", fullSite().Gatherer(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `bcd_http_sent_bytes_total{kind="image"} 1000`) {
		t.Errorf("/metrics: %s\n%s", resp.Status, body)
	}
	if resp, err := http.Get("http://" + addr.String() + "/"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("/: %v %v, want 404", resp, err)
	}
	if _, _, err := Serve(addr.String(), "metricsListen", fullSite().Gatherer(), slog.New(slog.DiscardHandler)); proto.CodeOf(err) != proto.InvalidConfig || proto.AsError(err).Details.Path != "metricsListen" {
		t.Errorf("an address taken: %v, want INVALID_CONFIG at metricsListen", err)
	}
}
