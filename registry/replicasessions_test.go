package registry

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestEarlierInstallationEndsAtEveryReplica: a machine's installed OS agent, its
// certificate kept by the user who had root on that OS, holds its session with one
// replica (the agents' side), and the machine is released through another (the API's
// side, whose own endpoint holds no session of it). At once the next NodeSpec is stored
// and a command relayed to the node's installed OS, as the machine's next installation
// would have them. The kept agent's session is ended with CloseRevoked, saying its
// certificate belongs to an earlier installation, and each of its later sessions is
// refused so; it never applies that NodeSpec nor runs the command. Before the release's
// commit told every replica, only the replica that started the release ended the
// sessions it held: the kept agent's stayed open at the other, which pushed it the
// next NodeSpec and relayed it the command. On one bbolt registry and on two replicas on
// etcd.
func TestEarlierInstallationEndsAtEveryReplica(t *testing.T) {
	backends := map[string]func(t *testing.T) (agentSide, apiSide *busyFleet){
		"bbolt": func(t *testing.T) (*busyFleet, *busyFleet) {
			f := serveBusy(t, Config{})
			storetest.Fill(t, f.r.st)
			return f, f
		},
		"etcd": func(t *testing.T) (*busyFleet, *busyFleet) { return startBusyReplicas(t, nil) },
	}
	for name, start := range backends {
		t.Run(name, func(t *testing.T) {
			agentSide, apiSide := start(t)
			n := storetest.Node(t, agentSide.r.st, store.Node{MACs: []string{"52:54:00:00:0a:01"}})
			node := n.ID
			agentSide.must(agentSide.hostSpec(node, 0), "storing a NodeSpec")
			kept, refused, stop := agentSide.firstInstallation(node, proto.RoleNode, store.TokenProvisioned)
			defer stop()
			var first proto.NodeSpec
			agentSide.must(agentSide.r.st.View(func(tx *store.Tx) (err error) { first, err = tx.NodeSpec(node); return err }), "reading the NodeSpec")
			agentSide.wait("the kept agent applies its installation's NodeSpec", func() bool { return kept.agent.wasApplied(first.Generation) })

			before := refused.count("earlier installation")
			_, err := call[api.TransitionStarted](apiSide.admin, "metal.release", api.TransitionRequest{TenantID: n.Tenant, NodeID: node})
			apiSide.must(err, "metal.release")
			apiSide.must(apiSide.hostSpec(node, 1), "storing the next NodeSpec")
			var next proto.NodeSpec
			apiSide.must(apiSide.r.st.View(func(tx *store.Tx) (err error) { next, err = tx.NodeSpec(node); return err }), "reading the NodeSpec")
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			relayed := make(chan error, 1)
			go func() {
				_, err := apiSide.r.plane.ep.Relay(ctx, node, proto.RoleNode, proto.Command{ID: "next-installation", Kind: "echo"})
				relayed <- err
			}()

			agentSide.wait("the kept agent's session ended, and its next two refused, as of an earlier installation", func() bool {
				return refused.count("earlier installation") >= before+3 && !agentSide.r.plane.ep.Connected(node, proto.RoleNode)
			})
			if err := <-relayed; proto.CodeOf(err) != proto.Timeout {
				t.Errorf("the command relayed to the node's installed OS: %v, want no answer (TIMEOUT)", err)
			}
			if got := kept.received("echo"); len(got) != 0 {
				t.Errorf("the kept agent ran the command relayed after the release %d times, want never", len(got))
			}
			if kept.agent.wasApplied(next.Generation) {
				t.Errorf("the kept agent applied the NodeSpec stored after the release (generation %d)", next.Generation)
			}
		})
	}
}

// TestTwinAcrossReplicas: two agent processes hold one node's certificate (an agent
// restarted while its old process still runs, a cloned disk, a stolen certificate), and
// each reaches another replica of two sharing one etcd store (a real three-member
// cluster). The second's session, opened at the second replica, ends the first's at the
// first replica with CloseReplaced, as a newer session at the same replica would, and
// the second replica counts the replacement (better_compute_agent_sessions_replaced_total,
// turn first), the first none. Then the first process comes back with a short backoff,
// and the two take turns across the replicas: the second replica counts its next
// replacement as another turn and warns that two agents hold the node's certificate,
// naming the node, the replica holding the session it replaced and the command that
// revokes the identity. Before a session's opening was told to the other replicas, both sessions
// stayed open, neither counted nor warned of.
func TestTwinAcrossReplicas(t *testing.T) {
	cluster := etcdtest.Start(t)
	cfg := Config{Store: StoreConfig{Backend: "etcd", EtcdEndpoints: cluster.Endpoints}, KEKFile: filepath.Join(t.TempDir(), "kek")}
	warnings := &twinWarnings{}
	one := serveBusy(t, cfg)
	cfg.Log = slog.New(warnings)
	two := serveBusy(t, cfg, one.r.Info().AdminConfig)
	storetest.Fill(t, one.r.st)
	node := storetest.Node(t, one.r.st, store.Node{MACs: []string{"52:54:00:00:0a:02"}}).ID
	creds, err := one.join(node, "node", one.mint(store.TokenProvisioned, node))
	if err != nil {
		t.Fatal(err)
	}
	// run runs a process of the certificate reaching the registry at addr, with
	// backoff, until the returned stop; log keeps what it logs.
	run := func(addr string, backoff session.Backoff, log *refusals) (stop func()) {
		s, err := session.New(session.Config{Addr: addr, Certificate: creds.Certificate, ServerCAs: creds.ServingCAs,
			Backoff: backoff, KeepAlive: 200 * time.Millisecond, Log: slog.New(log)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		return func() { cancel(); <-done }
	}
	eps := []*agents.Endpoint{one.r.plane.ep, two.r.plane.ep}

	firstLog := &refusals{from: slog.LevelInfo}
	stopFirst := run(one.r.Info().AgentEndpoint, session.Backoff{Min: 5 * time.Minute, Max: 10 * time.Minute}, firstLog)
	// Its session recorded, as the second replica reads the store: only then does a
	// session opened there replace one held here (a session both replicas open before
	// either hears of the other's is the race the turns settle).
	one.wait("the first process's session at the first replica, recorded in the store", func() bool {
		var recorded bool
		err := two.r.st.View(func(tx *store.Tx) error { recorded = two.r.plane.NodeAgentConnected(tx, node); return nil })
		return err == nil && eps[0].Connected(node, proto.RoleNode) && recorded
	})
	stopSecond := run(two.r.Info().AgentEndpoint, twinBackoff, &refusals{from: slog.LevelInfo})
	defer stopSecond()
	two.wait("the second process's session at the second replica replacing the first's", func() bool {
		return eps[1].Connected(node, proto.RoleNode) && !eps[0].Connected(node, proto.RoleNode) &&
			firstLog.count("replaced by a newer session of the same node and role at registry replica") == 1
	})
	stopFirst()
	if r := eps[1].Replacements(); r != (agents.Replacements{First: 1}) {
		t.Errorf("the second replica counted %+v, want one first replacement", r)
	}
	if r := eps[0].Replacements(); r != (agents.Replacements{}) {
		t.Errorf("the first replica counted %+v, want none: the second replaced its session", r)
	}
	if first := scrapeCounter(t, two.r.Info().MetricsURL, `better_compute_agent_sessions_replaced_total{turn="first"}`); first != 1 {
		t.Errorf("the second replica's metrics: %v first replacements, want 1", first)
	}
	if w := warnings.list(); len(w) != 0 {
		t.Errorf("one replacement was warned of: %v", w)
	}

	// The first process comes back, and the two take turns across the replicas.
	defer run(one.r.Info().AgentEndpoint, twinBackoff, &refusals{from: slog.LevelInfo})()
	two.wait("the second replica warning of the turns", func() bool { return len(warnings.list()) > 0 })
	if r := eps[1].Replacements(); r.Again < 1 {
		t.Errorf("the second replica counted %+v, want a turn", r)
	}
	if w := warnings.list(); len(w) > 0 && (w[0]["node"] != node || !strings.Contains(w[0]["replaced"], one.r.holder.Replica) ||
		!strings.Contains(w[0]["next"], "better-compute nodes retire "+node)) {
		t.Errorf("the warning %v: want the node, the replica holding the session replaced and the command revoking its identity", w[0])
	}
}
