// Package metrics is the registry's Prometheus metrics: every collector's name, type and
// labels are defined here and nowhere else, and this is the one package of the registry
// that imports the Prometheus client. The rooms count through small interfaces they
// declare themselves (api.RequestObserver, workflow.Observer, join.Observer), which
// *Registry satisfies, or expose counts the collectors read at each scrape (Sources).
//
// Labels are bounded: an API method is one the registry serves (others are "unknown"),
// a code is one of proto's, a step a step kind, a profile a shipped profile's id or
// "custom"; no label ever holds a node, tenant or credential id.
package metrics

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// namespace prefixes every metric of the registry.
const namespace = "better_compute"

// Sources are what the registry's gauges and the agent plane's counters are read from at
// each scrape. A nil source is left out.
type Sources struct {
	// NodesByState counts the nodes of every tenant by state.
	NodesByState func() (map[string]int, error)
	// Sites counts the sites.
	Sites func() (int, error)
	// AgentSessions counts the agents connected now, by role.
	AgentSessions func() map[string]int
	// Handshakes counts the agent endpoint's handshakes: completed in full, resumed,
	// refused at admission.
	Handshakes func() (full, resumed, refused int64)
	// RefusedAttempts counts the agents' connection attempts refused at admission, by
	// the agents' own count, told in their hellos.
	RefusedAttempts func() int64
	// Pushes counts NodeSpecs pushed to agents, and agents' acks: applied, failed.
	Pushes func() (pushed, acked, failed int64)
	// PushReadFailures counts the push workers' reads of the NodeSpecs to push that
	// failed (the store unavailable).
	PushReadFailures func() int64
	// Replacements counts agent sessions replaced by a newer session of the same node and
	// role while still connected: first, and again (within ten minutes of that agent's
	// last replacement: two agents with one certificate taking turns).
	Replacements func() (first, again int64)
	// StoreTransactions counts this replica's transactions and barrier rounds on etcd
	// (StoreCounts). Nil on bbolt.
	StoreTransactions func() StoreCounts
	// Log receives the errors a source returns.
	Log *slog.Logger
}

// StoreCounts are a replica's counts on the etcd store: the transactions that wrote and
// committed; the conflicts that made transactions run again, by what they read that
// another replica changed; and the barrier rounds it sent to the cluster (a
// linearizable read each, shared by the requests and transactions beginning meanwhile).
type StoreCounts struct {
	Commits, BarrierRounds int64
	Conflicts              map[StoreConflict]int64
}

// StoreConflict is what a transaction read that another replica's commit changed: its
// bucket (one of the store's, a bounded set) and kind (key, range, deleted, bucket, or
// empty when the change was not found again).
type StoreConflict struct {
	Bucket, Kind string
}

// Registry holds the registry's collectors.
type Registry struct {
	reg           *prometheus.Registry
	apiRequests   *prometheus.CounterVec
	apiDuration   *prometheus.HistogramVec
	apiQueued     prometheus.Histogram
	tenantBusy    prometheus.Counter
	credentials   *prometheus.CounterVec
	sourceRefused *prometheus.CounterVec
	workflows     *prometheus.CounterVec
	workflowDur   *prometheus.HistogramVec
	steps         *prometheus.CounterVec
	stepDur       *prometheus.HistogramVec
	deployRead    *prometheus.CounterVec
	deployWrote   prometheus.Counter
	tokenReused   *prometheus.CounterVec
}

// stepBuckets span a step's duration, from a control-plane step's milliseconds to an
// image write's half hour.
var stepBuckets = []float64{0.01, 0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600}

// New makes the registry's collectors over src, with the Go runtime's and the process's.
func New(src Sources) *Registry {
	m := &Registry{
		reg: prometheus.NewRegistry(),
		apiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "api", Name: "requests_total",
			Help: "API calls answered, by method and answer code (OK or proto's error code)."}, []string{"method", "code"}),
		apiDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "api", Name: "request_duration_seconds",
			Help: "Time from an API call's headers to its answer, by method.", Buckets: prometheus.DefBuckets}, []string{"method"}),
		apiQueued: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "api", Name: "queue_wait_seconds",
			Help: "Time authenticated API calls that could not run at once waited for a running slot, whether they got one or were refused.", Buckets: prometheus.DefBuckets}),
		tenantBusy: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "api", Name: "tenant_busy_total",
			Help: "Authenticated API calls refused tenant-busy: beyond their tenant's waiting calls or long polls, or after waiting their most for a slot."}),
		credentials: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "api", Name: "credential_checks_total",
			Help: "Credentials the API checked, by credential (bearer: API calls and console sign-ins, checked against the store; join-token: join.join's) and result (valid, failed)."}, []string{"credential", "result"}),
		sourceRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "api", Name: "source_refused_total",
			Help: "Calls refused source-failures, before their credential check: their source address had as many failed checks as it may; by the credential they carried (bearer: API calls and console sign-ins; join-token: join.join)."}, []string{"credential"}),
		workflows: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "workflow", Name: "runs_total",
			Help: "Workflow runs ended, by kind (the request that started them), profile (a shipped profile's id, or custom) and outcome."},
			[]string{"kind", "profile", "outcome"}),
		workflowDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "workflow", Name: "run_duration_seconds",
			Help: "Time from a workflow run's start to its end, by kind.", Buckets: stepBuckets}, []string{"kind"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "workflow", Name: "steps_total",
			Help: "Workflow steps ended, by step kind and outcome (succeeded, failed, skipped)."}, []string{"step", "outcome"}),
		stepDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "workflow", Name: "step_duration_seconds",
			Help: "Time from a step's start to its end, all its attempts included, by step kind.", Buckets: stepBuckets}, []string{"step"}),
		deployRead: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "deploy", Name: "read_bytes_total",
			Help: "Bytes of OS images the ramdisks' deploy.image read, as their progress reports tell, by where the image streamed from (cache, source)."}, []string{"location"}),
		deployWrote: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "deploy", Name: "written_bytes_total",
			Help: "Bytes the ramdisks' deploy.image wrote to disks (zeros left out), as their progress reports tell."}),
		tokenReused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "join", Name: "token_reused_total",
			Help: "Join tokens presented again after their join (refused token-used; their secret matched), by kind (provisioned, ramdisk, site) and address: same as their join's, other (another host may hold the token), unknown."},
			[]string{"kind", "address"}),
	}
	m.reg.MustRegister(m.apiRequests, m.apiDuration, m.apiQueued, m.tenantBusy, m.credentials, m.sourceRefused, m.workflows, m.workflowDur, m.steps, m.stepDur, m.deployRead, m.deployWrote, m.tokenReused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), sources{src})
	return m
}

// MaxScrapes bounds the scrapes served at once; one more is answered 503 at once, so
// whoever reaches the listener cannot make the registry count its nodes over and over
// in parallel.
const MaxScrapes = 2

// Handler serves the metrics in Prometheus's text format, MaxScrapes at once.
func (m *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, MaxRequestsInFlight: MaxScrapes})
}

// Gatherer is what the collectors gather from, for tests that lint the metrics.
func (m *Registry) Gatherer() prometheus.Gatherer { return m.reg }

// APIRequest counts one API call: its method (a registered one, else "unknown"), its
// answer's code and how long it took.
func (m *Registry) APIRequest(method, code string, took time.Duration) {
	m.apiRequests.WithLabelValues(method, code).Inc()
	m.apiDuration.WithLabelValues(method).Observe(took.Seconds())
}

// APIQueued observes how long an authenticated call waited for its running slot.
func (m *Registry) APIQueued(waited time.Duration) { m.apiQueued.Observe(waited.Seconds()) }

// APITenantBusy counts an authenticated call refused tenant-busy.
func (m *Registry) APITenantBusy() { m.tenantBusy.Inc() }

// APICredentialChecked counts a credential checked: a bearer credential against the
// store, or a join token by the join (api.CredentialBearer, api.CredentialJoinToken).
func (m *Registry) APICredentialChecked(credential string, valid bool) {
	result := "failed"
	if valid {
		result = "valid"
	}
	m.credentials.WithLabelValues(credential, result).Inc()
}

// APISourceRefused counts a call refused before its credential check, its source over
// its bound of failed checks, by the credential it carried.
func (m *Registry) APISourceRefused(credential string) {
	m.sourceRefused.WithLabelValues(credential).Inc()
}

// StepEnded counts a workflow step that ended.
func (m *Registry) StepEnded(use, outcome string, took time.Duration) {
	m.steps.WithLabelValues(use, outcome).Inc()
	if took > 0 {
		m.stepDur.WithLabelValues(use).Observe(took.Seconds())
	}
}

// WorkflowEnded counts a workflow run that ended.
func (m *Registry) WorkflowEnded(kind, profile, outcome string, took time.Duration) {
	m.workflows.WithLabelValues(kind, profile, outcome).Inc()
	m.workflowDur.WithLabelValues(kind).Observe(took.Seconds())
}

// DeployStreamed counts what a deploy.image progress report adds.
func (m *Registry) DeployStreamed(location string, read, written int64) {
	m.deployRead.WithLabelValues(location).Add(float64(read))
	m.deployWrote.Add(float64(written))
}

// JoinTokenReused counts a join token presented again after its join, by kind and by how
// its address compares with its join's.
func (m *Registry) JoinTokenReused(kind, address string) {
	m.tokenReused.WithLabelValues(kind, address).Inc()
}

// sources is the collector of the metrics read at each scrape.
type sources struct{ src Sources }

var (
	nodesDesc = prometheus.NewDesc(namespace+"_nodes", "Nodes of every tenant, by state.", []string{"state"}, nil)
	sitesDesc = prometheus.NewDesc(namespace+"_sites", "Sites the registry knows.", nil, nil)
	sessDesc  = prometheus.NewDesc(namespace+"_agent_sessions", "Agents connected to the agent endpoint now, by role.", []string{"role"}, nil)
	handDesc  = prometheus.NewDesc(namespace+"_agent_handshakes_total",
		"Agents' connection attempts: full (a new TLS session), resumed (a resumed TLS session), refused (at admission, too many in flight).", []string{"result"}, nil)
	refusedDesc = prometheus.NewDesc(namespace+"_agent_refused_attempts_total",
		"Agents' connection attempts refused at admission, by the agents' own count, told in the hello of their next session (at most 8 a hello; agents of earlier versions tell none): the attempts behind agent_handshakes_total{result=\"refused\"}, which counts their first packets.", nil, nil)
	pushDesc = prometheus.NewDesc(namespace+"_agent_nodespec_pushes_total", "NodeSpecs pushed to agents.", nil, nil)
	ackDesc  = prometheus.NewDesc(namespace+"_agent_nodespec_acks_total", "Agents' acks of a NodeSpec, by result (applied, failed).", []string{"result"}, nil)
	readDesc = prometheus.NewDesc(namespace+"_agent_nodespec_read_failures_total",
		"Reads of the NodeSpecs to push that failed, the store unavailable: the push workers read them again after a pause of 250 ms doubling with each failure in a row, up to 8 s.", nil, nil)
	replDesc = prometheus.NewDesc(namespace+"_agent_sessions_replaced_total",
		"Agent sessions a newer session of the same node and role replaced while still connected, by turn: again when that agent's session had been replaced within ten minutes before (two agents with one certificate taking turns), else first.",
		[]string{"turn"}, nil)
	commitsDesc = prometheus.NewDesc(namespace+"_store_commits_total",
		"Transactions that wrote and committed on the etcd store, this replica's.", nil, nil)
	conflictsDesc = prometheus.NewDesc(namespace+"_store_conflicts_total",
		"Transactions of this replica on the etcd store that met another replica's write to what they read and ran again, by bucket and kind: key (a key read by name), range (a key written inside a range a cursor read), deleted (a key deleted from a bucket a cursor walked), bucket (any write to a bucket read, past etcd's 128 compares).",
		[]string{"bucket", "kind"}, nil)
	barriersDesc = prometheus.NewDesc(namespace+"_store_barrier_rounds_total",
		"Barrier rounds this replica sent to the etcd store's cluster: a linearizable read each, shared by the requests and transactions that began while the round before was in flight.", nil, nil)
)

func (s sources) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodesDesc, sitesDesc, sessDesc, handDesc, refusedDesc, pushDesc, ackDesc, readDesc, replDesc, commitsDesc, conflictsDesc, barriersDesc} {
		ch <- d
	}
}

func (s sources) Collect(ch chan<- prometheus.Metric) {
	src := s.src
	if src.NodesByState != nil {
		if counts, err := src.NodesByState(); err != nil {
			src.Log.Error("metrics: count nodes", "err", err)
		} else {
			for state, n := range counts {
				ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(n), state)
			}
		}
	}
	if src.Sites != nil {
		if n, err := src.Sites(); err != nil {
			src.Log.Error("metrics: count sites", "err", err)
		} else {
			ch <- prometheus.MustNewConstMetric(sitesDesc, prometheus.GaugeValue, float64(n))
		}
	}
	if src.AgentSessions != nil {
		for role, n := range src.AgentSessions() {
			ch <- prometheus.MustNewConstMetric(sessDesc, prometheus.GaugeValue, float64(n), role)
		}
	}
	if src.Handshakes != nil {
		full, resumed, refused := src.Handshakes()
		for result, n := range map[string]int64{"full": full, "resumed": resumed, "refused": refused} {
			ch <- prometheus.MustNewConstMetric(handDesc, prometheus.CounterValue, float64(n), result)
		}
	}
	if src.RefusedAttempts != nil {
		ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(src.RefusedAttempts()))
	}
	if src.Pushes != nil {
		pushed, acked, failed := src.Pushes()
		ch <- prometheus.MustNewConstMetric(pushDesc, prometheus.CounterValue, float64(pushed))
		ch <- prometheus.MustNewConstMetric(ackDesc, prometheus.CounterValue, float64(acked), "applied")
		ch <- prometheus.MustNewConstMetric(ackDesc, prometheus.CounterValue, float64(failed), "failed")
	}
	if src.PushReadFailures != nil {
		ch <- prometheus.MustNewConstMetric(readDesc, prometheus.CounterValue, float64(src.PushReadFailures()))
	}
	if src.Replacements != nil {
		first, again := src.Replacements()
		ch <- prometheus.MustNewConstMetric(replDesc, prometheus.CounterValue, float64(first), "first")
		ch <- prometheus.MustNewConstMetric(replDesc, prometheus.CounterValue, float64(again), "again")
	}
	if src.StoreTransactions != nil {
		counts := src.StoreTransactions()
		ch <- prometheus.MustNewConstMetric(commitsDesc, prometheus.CounterValue, float64(counts.Commits))
		for c, n := range counts.Conflicts {
			ch <- prometheus.MustNewConstMetric(conflictsDesc, prometheus.CounterValue, float64(n), c.Bucket, c.Kind)
		}
		ch <- prometheus.MustNewConstMetric(barriersDesc, prometheus.CounterValue, float64(counts.BarrierRounds))
	}
}
