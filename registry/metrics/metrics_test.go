package metrics

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// full is a registry whose every metric has a sample.
func full() *Registry {
	m := New(Sources{
		NodesByState:     func() (map[string]int, error) { return map[string]int{"ready": 2, "active": 1}, nil },
		Sites:            func() (int, error) { return 1, nil },
		AgentSessions:    func() map[string]int { return map[string]int{"site": 1, "node": 3} },
		Handshakes:       func() (int64, int64, int64) { return 4, 2, 1 },
		RefusedAttempts:  func() int64 { return 8 },
		Pushes:           func() (int64, int64, int64) { return 5, 4, 1 },
		PushReadFailures: func() int64 { return 6 },
		Replacements:     func() (int64, int64) { return 3, 7 },
		StoreTransactions: func() StoreCounts {
			return StoreCounts{Commits: 9, BarrierRounds: 11, Conflicts: map[StoreConflict]int64{{Bucket: "agent-commands", Kind: "range"}: 2}}
		},
		Log: slog.New(slog.DiscardHandler),
	})
	m.APIRequest("metal.list", "OK", 3*time.Millisecond)
	m.APIQueued(20 * time.Millisecond)
	m.APITenantBusy()
	m.APICredentialChecked("join-token", false)
	m.APISourceRefused("bearer")
	m.StepEnded("deploy.image", "succeeded", 2*time.Minute)
	m.WorkflowEnded("deploy", "custom", "succeeded", 3*time.Minute)
	m.DeployStreamed("cache", 100, 80)
	return m
}

// TestMetricsPassTheLint: promlint (names with units and _total, help on every metric,
// no reserved labels) finds nothing to say of any of the registry's metrics.
func TestMetricsPassTheLint(t *testing.T) {
	problems, err := testutil.GatherAndLint(full().Gatherer())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestSourcesAreReadAtEachScrape: the gauges and the agent plane's counters show what
// the sources say.
func TestSourcesAreReadAtEachScrape(t *testing.T) {
	want := `
# HELP better_compute_agent_handshakes_total Agents' connection attempts: full (a new TLS session), resumed (a resumed TLS session), refused (at admission, too many in flight).
# TYPE better_compute_agent_handshakes_total counter
better_compute_agent_handshakes_total{result="full"} 4
better_compute_agent_handshakes_total{result="refused"} 1
better_compute_agent_handshakes_total{result="resumed"} 2
# HELP better_compute_agent_refused_attempts_total Agents' connection attempts refused at admission, by the agents' own count, told in the hello of their next session (at most 8 a hello; agents of earlier versions tell none): the attempts behind agent_handshakes_total{result="refused"}, which counts their first packets.
# TYPE better_compute_agent_refused_attempts_total counter
better_compute_agent_refused_attempts_total 8
# HELP better_compute_nodes Nodes of every tenant, by state.
# TYPE better_compute_nodes gauge
better_compute_nodes{state="active"} 1
better_compute_nodes{state="ready"} 2
# HELP better_compute_agent_sessions Agents connected to the agent endpoint now, by role.
# TYPE better_compute_agent_sessions gauge
better_compute_agent_sessions{role="node"} 3
better_compute_agent_sessions{role="site"} 1
# HELP better_compute_agent_sessions_replaced_total Agent sessions a newer session of the same node and role replaced while still connected, by turn: again when that agent's session had been replaced within ten minutes before (two agents with one certificate taking turns), else first.
# TYPE better_compute_agent_sessions_replaced_total counter
better_compute_agent_sessions_replaced_total{turn="again"} 7
better_compute_agent_sessions_replaced_total{turn="first"} 3
# HELP better_compute_agent_nodespec_read_failures_total Reads of the NodeSpecs to push that failed, the store unavailable: the push workers read them again after a pause of 250 ms doubling with each failure in a row, up to 8 s.
# TYPE better_compute_agent_nodespec_read_failures_total counter
better_compute_agent_nodespec_read_failures_total 6
# HELP better_compute_store_commits_total Transactions that wrote and committed on the etcd store, this replica's.
# TYPE better_compute_store_commits_total counter
better_compute_store_commits_total 9
# HELP better_compute_store_conflicts_total Transactions of this replica on the etcd store that met another replica's write to what they read and ran again, by bucket and kind: key (a key read by name), range (a key written inside a range a cursor read), deleted (a key deleted from a bucket a cursor walked), bucket (any write to a bucket read, past etcd's 128 compares).
# TYPE better_compute_store_conflicts_total counter
better_compute_store_conflicts_total{bucket="agent-commands",kind="range"} 2
# HELP better_compute_store_barrier_rounds_total Barrier rounds this replica sent to the etcd store's cluster: a linearizable read each, shared by the requests and transactions that began while the round before was in flight.
# TYPE better_compute_store_barrier_rounds_total counter
better_compute_store_barrier_rounds_total 11
`
	err := testutil.GatherAndCompare(full().Gatherer(), strings.NewReader(want),
		"better_compute_agent_handshakes_total", "better_compute_agent_refused_attempts_total", "better_compute_nodes", "better_compute_agent_sessions", "better_compute_agent_sessions_replaced_total",
		"better_compute_agent_nodespec_read_failures_total", "better_compute_store_commits_total", "better_compute_store_conflicts_total", "better_compute_store_barrier_rounds_total")
	if err != nil {
		t.Error(err)
	}
}

// TestScrapesAreBounded: while MaxScrapes scrapes are being answered (their count of the
// nodes held up), one more is refused at once with 503, and answered once they are done.
func TestScrapesAreBounded(t *testing.T) {
	inside, release := make(chan struct{}), make(chan struct{})
	m := New(Sources{NodesByState: func() (map[string]int, error) {
		inside <- struct{}{}
		<-release
		return map[string]int{}, nil
	}, Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	var held sync.WaitGroup
	for range MaxScrapes {
		held.Go(func() {
			if resp, err := http.Get(srv.URL); err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("a scrape within the bound: %v %v", resp, err)
			}
		})
		<-inside
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(srv.URL)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("one scrape over the bound: %v %v, want 503 at once", resp, err)
	}
	close(release)
	held.Wait()
	go func() {
		for range inside {
		}
	}()
	if resp, err := http.Get(srv.URL); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("a scrape once the others are done: %v %v", resp, err)
	}
}
