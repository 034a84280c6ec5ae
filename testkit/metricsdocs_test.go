package testkit

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	agentmetrics "github.com/better-compute/better-compute/agent/metrics"
	"github.com/better-compute/better-compute/cache"
	"github.com/better-compute/better-compute/hostconverge"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/metrics"
	"github.com/better-compute/better-compute/testkit/docstable"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestDocsNameOnlyRealMetrics: every metric name the operations page, the alerting rules
// and the Grafana dashboard use is one the registry, bcd site or bcd node exports (a
// histogram's _bucket, _count and _sum included), and the operations page's reference
// names every metric they export.
func TestDocsNameOnlyRealMetrics(t *testing.T) {
	exported := map[string]bool{}
	for name := range exportedLabels(t) {
		exported[name] = true
	}
	var page string
	for _, doc := range []string{"docs/operations.md", "examples/prometheus/alerts.yml", "examples/grafana/better-compute.json"} {
		data, err := os.ReadFile(filepath.Join(moduleRoot(), doc))
		if err != nil {
			t.Fatal(err)
		}
		if doc == "docs/operations.md" {
			page = string(data)
		}
		for _, name := range metricName.FindAllString(string(data), -1) {
			if !exported[name] && !exported[histogramBase(name)] {
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

// TestMetricsReferenceSaysWhatIsExported: every metric the registry, bcd site and bcd node
// export (every one their collectors describe, sampled or not) has a row in
// docs/operations.md's reference for its process, with the type and the labels it is
// exported with, and every row names an exported metric.
func TestMetricsReferenceSaysWhatIsExported(t *testing.T) {
	types := map[string]string{}
	for _, f := range exportedFamilies(t) {
		types[f.GetName()] = strings.ToLower(f.GetType().String())
	}
	labels := exportedLabels(t)
	for _, name := range slices.Sorted(maps.Keys(labels)) {
		if _, ok := types[name]; !ok {
			t.Errorf("%s is exported but has no sample in exportedFamilies, so its documented type is not checked: give it one there", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(types)) {
		if _, ok := labels[name]; !ok {
			t.Errorf("%s is exported but no collector describes it: describe it, so that it is checked without a sample", name)
		}
	}
	doc := filepath.Join(moduleRoot(), "docs", "operations.md")
	documented := map[string]bool{}
	for _, heading := range []string{"### The registry (`better-compute serve`)", "### The site agent (`bcd site`)", "### The node agent (`bcd node`)"} {
		_, rows := docstable.Table(t, doc, heading, "name")
		for _, r := range rows {
			names := docstable.Names(r.Cells[0])
			if len(names) != 1 || len(r.Cells) < 3 {
				t.Errorf("docs/operations.md:%d: a row of the metrics reference names one metric, then its type and labels", r.Line)
				continue
			}
			name := names[0]
			documented[name] = true
			want, ok := labels[name]
			if !ok {
				t.Errorf("docs/operations.md:%d: %s is not exported", r.Line, name)
				continue
			}
			if typ, sampled := types[name]; sampled && r.Cells[1] != typ {
				t.Errorf("docs/operations.md:%d: %s is documented as a %s; it is exported as a %s", r.Line, name, r.Cells[1], typ)
			}
			got := docstable.Names(r.Cells[2])
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("docs/operations.md:%d: %s is documented with labels %v; it is exported with %v", r.Line, name, got, want)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(labels)) {
		if !documented[name] {
			t.Errorf("docs/operations.md's metrics reference has no row for %s: add one under its process, with its type and labels", name)
		}
	}
}

// The patterns the documentation tests read metric names and labels with.
var (
	metricName = regexp.MustCompile(`\b(?:better_compute|bcd)_[a-z_]+[a-z]\b`)
	// seriesLabel is a label of a series written `name{label="value",...}`.
	seriesLabel = regexp.MustCompile(`(\w+)="`)
	// groupedOrMatched is a PromQL `by (labels)` or a selector's `{matchers}`.
	groupedOrMatched = regexp.MustCompile(`\bby \(([^)]*)\)|\{([^}]*)\}`)
	word             = regexp.MustCompile(`\w+`)
	matcherLabel     = regexp.MustCompile(`(\w+)\s*(?:=|!=|=~|!~)\s*"`)
)

// histogramBase is name without a histogram series' _bucket, _count or _sum.
func histogramBase(name string) string {
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		name = strings.TrimSuffix(name, suffix)
	}
	return name
}

// exportedFamilies is every better_compute_ and bcd_ metric family the registry, bcd site
// and bcd node export, each with one sample of every label set its code gives it.
func exportedFamilies(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	var out []*dto.MetricFamily
	for _, g := range gatherers() {
		families, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if projects(f.GetName()) {
				out = append(out, f)
			}
		}
	}
	return out
}

// projects says whether a metric is the project's own, not the Go runtime's or the
// process's.
func projects(name string) bool {
	return strings.HasPrefix(name, "better_compute_") || strings.HasPrefix(name, "bcd_")
}

// gatherers are the registry's, bcd site's and bcd node's metrics, each labelled metric
// given a sample of every label set its code gives it.
func gatherers() []prometheus.Gatherer {
	reg := metrics.New(metrics.Sources{
		NodesByState:     func() (map[string]int, error) { return map[string]int{"ready": 1}, nil },
		Sites:            func() (int, error) { return 1, nil },
		AgentSessions:    func() map[string]int { return map[string]int{"site": 1} },
		Handshakes:       func() (int64, int64, int64) { return 1, 1, 1 },
		RefusedAttempts:  func() int64 { return 1 },
		Pushes:           func() (int64, int64, int64) { return 1, 1, 1 },
		PushReadFailures: func() int64 { return 1 },
		Replacements:     func() (int64, int64) { return 1, 1 },
		StoreTransactions: func() metrics.StoreCounts {
			return metrics.StoreCounts{Commits: 9, BarrierRounds: 1, Conflicts: map[metrics.StoreConflict]int64{{Bucket: "agent-commands", Kind: "range"}: 1}}
		},
		Log: slog.New(slog.DiscardHandler),
	})
	reg.APIRequest("metal.get", "OK", time.Millisecond)
	reg.APIQueued(time.Millisecond)
	reg.APITenantBusy()
	reg.APICredentialChecked(api.CredentialBearer, true)
	reg.APICredentialChecked(api.CredentialJoinToken, false)
	reg.APISourceRefused(api.CredentialJoinToken)
	reg.StepEnded("deploy.deploy", "succeeded", time.Second)
	reg.WorkflowEnded("deploy", "custom", "succeeded", time.Second)
	reg.DeployStreamed("cache", 1, 1)
	reg.JoinTokenReused("ramdisk", "other")
	site := agentmetrics.NewSite(func() cache.Usage { return cache.Usage{} }, func() int64 { return 0 }, func() bool { return true })
	site.DHCPReply("offer")
	site.TFTPTransfer(true, 1)
	site.HTTPServed("image", 200, 1)
	site.ImageRequested(true)
	site.PullEnded("ready")
	node := agentmetrics.NewNode(func() bool { return true })
	node.Pass([]hostconverge.UnitResult{{Unit: "kernel.sysctl", Status: hostconverge.Changed}, {Unit: "kernel.sysctl", Status: hostconverge.Failed}})
	return []prometheus.Gatherer{reg.Gatherer(), site.Gatherer(), node.Gatherer()}
}

// TestExampleAlerts: Prometheus's own rule checker accepts examples/prometheus/alerts.yml,
// and its rule unit tests (alerts_test.yml) pass: every alert fires on a broken fleet with
// its summary as written and none fires on a healthy one. The tests' series carry exactly
// the labels the registry, bcd site and bcd node export for their metric (beside the
// job and instance a scrape adds), so the alerts are tested on what a scrape would hold.
func TestExampleAlerts(t *testing.T) {
	promtool := needPromtool(t)
	dir := filepath.Join(moduleRoot(), "examples", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	labels := exportedLabels(t)
	data, err := os.ReadFile(filepath.Join(dir, "alerts_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	series := regexp.MustCompile(`series: '([a-z_]+)\{([^}]*)\}'`).FindAllStringSubmatch(string(data), -1)
	if len(series) == 0 {
		t.Fatal("alerts_test.yml has no input series")
	}
	for _, s := range series {
		name := s[1]
		if name == "up" {
			continue // Prometheus's own, per scrape target
		}
		var got []string
		for _, l := range seriesLabel.FindAllStringSubmatch(s[2], -1) {
			if l[1] != "job" && l[1] != "instance" {
				got = append(got, l[1])
			}
		}
		slices.Sort(got)
		want, ok := labels[name]
		if !ok {
			t.Errorf("alerts_test.yml: %s is not exported", name)
		} else if !slices.Equal(got, want) {
			t.Errorf("alerts_test.yml: %s has labels %v, exported with %v", name, got, want)
		}
	}
}

// TestDashboardQueries: every query of the Grafana dashboard parses as PromQL (Prometheus's
// rule checker, given each as a recording rule), and every label it groups by or matches on
// is one its metrics are exported with (or le, job, instance).
func TestDashboardQueries(t *testing.T) {
	promtool := needPromtool(t)
	data, err := os.ReadFile(filepath.Join(moduleRoot(), "examples", "grafana", "better-compute.json"))
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && k == "expr" {
					exprs = append(exprs, s)
				} else {
					walk(e)
				}
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	var dashboard any
	if err := json.Unmarshal(data, &dashboard); err != nil {
		t.Fatal(err)
	}
	walk(dashboard)
	if len(exprs) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(e) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "      - record: dashboard_query_%d\n        expr: %s\n", i, q)
	}
	file := filepath.Join(t.TempDir(), "dashboard.yml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	labels := exportedLabels(t)
	for _, e := range exprs {
		known := map[string]bool{"le": true, "job": true, "instance": true}
		for _, name := range metricName.FindAllString(e, -1) {
			for _, l := range slices.Concat(labels[name], labels[histogramBase(name)]) {
				known[l] = true
			}
		}
		for _, m := range groupedOrMatched.FindAllStringSubmatch(e, -1) {
			for _, l := range word.FindAllString(m[1], -1) {
				if !known[l] {
					t.Errorf("dashboard query %q groups by %s, which its metrics do not have", e, l)
				}
			}
			for _, l := range matcherLabel.FindAllStringSubmatch(m[2], -1) {
				if !known[l[1]] {
					t.Errorf("dashboard query %q matches on %s, which its metrics do not have", e, l[1])
				}
			}
		}
	}
}

// needPromtool is Prometheus's promtool (Debian's prometheus package, .ci/deps.sh).
func needPromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: run .ci/deps.sh (Debian's prometheus package)")
	}
	return p
}

// exportedLabels is the label names, sorted (a histogram's le aside), of every metric the
// registry, bcd site and bcd node export: every one their collectors describe, whether a
// sample of it was taken or not.
func exportedLabels(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, g := range gatherers() {
		c, ok := g.(prometheus.Collector)
		if !ok {
			t.Fatalf("%T cannot describe its metrics: gather them from a *prometheus.Registry", g)
		}
		descs := make(chan *prometheus.Desc)
		go func() {
			c.Describe(descs)
			close(descs)
		}()
		for d := range descs {
			name, labels, err := describe(d)
			if err != nil {
				t.Fatal(err)
			}
			if projects(name) {
				out[name] = labels
			}
		}
	}
	return out
}

// descFields are a prometheus.Desc's name, const labels and variable labels as its String
// writes them (the client library gives no other way to read them).
var descFields = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), .*, constLabels: \{(.*)\}, variableLabels: \{([^{}]*)\}\}$`)

// describe is a metric's fully-qualified name and its label names, sorted: the const
// labels and the variable ones.
func describe(d *prometheus.Desc) (string, []string, error) {
	m := descFields.FindStringSubmatch(d.String())
	if m == nil {
		return "", nil, fmt.Errorf("cannot read %s", d)
	}
	name, err := strconv.Unquote(m[1])
	if err != nil {
		return "", nil, fmt.Errorf("cannot read the name of %s: %v", d, err)
	}
	var labels []string
	for _, l := range seriesLabel.FindAllStringSubmatch(m[2], -1) {
		labels = append(labels, l[1])
	}
	for _, l := range strings.Split(m[3], ",") {
		if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
			labels = append(labels, l)
		}
	}
	slices.Sort(labels)
	return name, labels, nil
}
