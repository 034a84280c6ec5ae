package agentplane

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/testkit"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// BenchmarkReplicaSessions holds BC_REPLICA_AGENTS agent sessions (10,000 by default)
// over three registry replicas on one three-member etcd cluster, each replica a process
// of its own (the registry child on the etcd store), the agents in child processes of
// BC_LOAD_PER_PROCESS sessions each (5,000). Every agent is given the three replicas'
// endpoints, its own first in turn from agent to agent as bcd's config lists them, and
// picks one as the agent does. Each phase is timed with the CPU time of every process:
// the replicas, the agents and the etcd members.
//
//   - connect: from starting the agent processes until every agent has said hello and
//     acknowledged generation 1;
//   - push: a NodeSpec change of every node written through replica 1 (100 a
//     transaction, eight transactions at a time; the other replicas learn of it through
//     the store's watch), until every agent has acknowledged it;
//   - kill: replica 1 killed with SIGKILL, which tells its agents nothing, until every
//     agent it held is back on replica 2 or 3. An agent notices when its session falls
//     silent: after its idle timeout, four keep-alive periods (BC_REPLICA_KEEPALIVE,
//     a duration; the agent's default of 25 s when unset) or the endpoint's 90 s,
//     whichever is shorter, from the last packet it heard;
//   - push again: a change of every node written through replica 2, until every agent
//     has acknowledged it.
//
// The replicas count the acknowledgements they record in the store (each node once a
// generation); after each push the store itself is read back: every node must have
// observed its latest generation.
func BenchmarkReplicaSessions(b *testing.B) {
	var keepAlive time.Duration
	if v := os.Getenv("BC_REPLICA_KEEPALIVE"); v != "" {
		var err error
		if keepAlive, err = time.ParseDuration(v); err != nil {
			b.Fatalf("BC_REPLICA_KEEPALIVE=%s: %v (give a duration such as 5s)", v, err)
		}
	}
	r := runReplicaFleet(b, envInt("BC_REPLICA_AGENTS", 10000), envInt("BC_LOAD_PER_PROCESS", 5000), keepAlive, 10*time.Minute)
	r.print()
	b.ReportMetric(r.connect.wall.Seconds(), "connect-s")
	b.ReportMetric(r.push.wall.Seconds(), "push-s")
	b.ReportMetric(r.kill.wall.Seconds(), "failover-s")
	b.ReportMetric(r.pushAgain.wall.Seconds(), "push-after-kill-s")
	b.ReportMetric(float64(r.before[0]), "moved-sessions")
	b.ReportMetric(float64(r.hs.Refused), "failover-refused")
	b.ReportMetric(r.push.cpu[0].Seconds()*1000/float64(r.n), "push-replicas-CPU-ms/session")
	b.ReportMetric(r.pushAgain.cpu[0].Seconds()*1000/float64(r.n), "push-after-kill-replicas-CPU-ms/session")
}

// TestReplicaKilledUnderAgents runs BenchmarkReplicaSessions's path with 300 agents in
// two processes and a keep-alive of 1 s (an agent notices a dead replica within about
// 5 s): every agent acknowledges the change written through replica 1, as the store
// records (runReplicaFleet checks it); replica 1 is killed with SIGKILL, every agent it
// held is back on replica 2 or 3, resuming its TLS session there (the replicas share
// their ticket key through the store), and every agent acknowledges the change written
// through replica 2, as the store records.
func TestReplicaKilledUnderAgents(t *testing.T) {
	const n = 300
	r := runReplicaFleet(t, n, n/2, time.Second, 2*time.Minute)
	if r.before[0] == 0 {
		t.Fatalf("sessions before the kill: %v: replica 1 held none, so its kill moved nobody", r.before)
	}
	if r.after[1]+r.after[2] != n {
		t.Errorf("sessions after the kill: %v, want all %d on replicas 2 and 3", r.after, n)
	}
	if r.hs.Resumed < int64(r.before[0]) {
		t.Errorf("replicas 2 and 3 resumed %d TLS sessions while replica 1's %d agents came back: %+v", r.hs.Resumed, r.before[0], r.hs)
	}
}

// replicaFleet is three registry replicas in child processes (the registry child, each
// with its own client of one etcd cluster), and the agent processes holding sessions
// with them.
type replicaFleet struct {
	tb       testing.TB
	cluster  *etcdtest.Cluster
	replicas []*child
	// killed is how many replicas, from the first, were killed.
	killed  int
	agents  []*child
	timeout time.Duration
}

// replicaState is what a replica child says of itself (its "state" request): the
// sessions it holds, the nodes whose acknowledgement of one generation it recorded,
// its handshakes.
type replicaState struct {
	sessions, acked int
	hs              agents.Handshakes
}

// replicaRun is what runReplicaFleet measured.
type replicaRun struct {
	n, processes int
	keepAlive    time.Duration
	// The phases, and how long writing each change took (within its phase).
	connect, push, kill, pushAgain *fleetPhase
	written, writtenAgain          time.Duration
	// before and after are the sessions of each replica before replica 1 was killed and
	// once its agents were back.
	before, after [3]int
	// back records when replica 1's agents were back on the others.
	back quantiles
	// hs are the handshakes of replicas 2 and 3 from the kill until its agents were back.
	hs agents.Handshakes
	// keys and bytes are what the store holds at the end (keys and values under the
	// prefix): what each replica's mirror of it holds; rss the replicas' resident memory.
	keys  int
	bytes int64
	rss   [3]int64
}

// runReplicaFleet starts an etcd cluster, three replicas and n agents in processes of per,
// and runs the phases of BenchmarkReplicaSessions, each waited for at most timeout. The
// agents' keep-alive period is keepAlive (the agent's default when 0).
func runReplicaFleet(tb testing.TB, n, per int, keepAlive, timeout time.Duration) *replicaRun {
	tb.Helper()
	cluster := etcdtest.Start(tb)
	ca, err := testkit.NewCA()
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	writeCA(tb, ca, dir)
	f := &replicaFleet{tb: tb, cluster: cluster, timeout: timeout}
	addrs := make([]string, 3)
	for i := range addrs {
		addrs[i] = freeUDP(tb)
		f.replicas = append(f.replicas, startChild(tb, "registry", "BC_DIR="+dir, "BC_ADDR="+addrs[i],
			"BC_ETCD="+strings.Join(cluster.Endpoints, ","), "BC_ETCD_PREFIX=agentplane"))
	}
	r := &replicaRun{n: n, keepAlive: keepAlive}
	f.writeSpecs(0, n, 1)

	r.connect = f.startPhase()
	for first := 0; first < n; first += per {
		f.agents = append(f.agents, startChild(tb, "agents", "BC_DIR="+dir, "BC_ADDR="+strings.Join(addrs, ","),
			"BC_FIRST="+strconv.Itoa(first), "BC_COUNT="+strconv.Itoa(min(per, n-first)), "BC_KEEPALIVE="+keepAlive.String()))
	}
	r.processes = len(f.agents)
	f.wait("every agent at generation 1", func() bool {
		_, all := f.states(1)
		return all.acked >= n && all.sessions == n
	})
	r.connect.end()

	r.push, r.written = f.pushAll(0, n, 2)

	before, _ := f.states(3)
	for i, s := range before {
		r.before[i] = s.sessions
	}
	r.back = quantiles{n: r.before[0]}
	r.kill = f.startPhase()
	f.replicas[0].kill()
	f.killed = 1
	f.wait("replica 1's agents back on replicas 2 and 3", func() bool {
		_, all := f.states(3)
		return r.back.observe(all.sessions-r.before[1]-r.before[2], r.kill.start)
	})
	r.kill.end()
	after, _ := f.states(3)
	for i, s := range after {
		r.after[i] = s.sessions
		if i < f.killed {
			continue
		}
		r.hs.Accepted += s.hs.Accepted - before[i].hs.Accepted
		r.hs.Resumed += s.hs.Resumed - before[i].hs.Resumed
		r.hs.Refused += s.hs.Refused - before[i].hs.Refused
		r.hs.Abandoned += s.hs.Abandoned - before[i].hs.Abandoned
	}

	r.pushAgain, r.writtenAgain = f.pushAll(1, n, 3)
	r.keys, r.bytes = storeSize(tb, cluster.Endpoints, "agentplane/")
	for i := f.killed; i < len(f.replicas); i++ {
		rss, err := testkit.RSS(f.replicas[i].cmd.Process.Pid)
		if err != nil {
			tb.Fatal(err)
		}
		r.rss[i] = rss
	}
	return r
}

// storeSize counts the keys under prefix and the bytes of their keys and values.
func storeSize(tb testing.TB, endpoints []string, prefix string) (keys int, bytes int64) {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatal(err)
	}
	defer cli.Close()
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(1000))
		cancel()
		if err != nil {
			tb.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			keys, bytes = keys+1, bytes+int64(len(kv.Key)+len(kv.Value))
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return keys, bytes
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// writeSpecs has replica i write the NodeSpecs of nodes 0..n-1, moving them to
// generation gen, and returns how long it took.
func (f *replicaFleet) writeSpecs(i, n int, gen int64) time.Duration {
	f.tb.Helper()
	start := time.Now()
	if got, want := f.replicas[i].ask("specs %d %d", n, gen), fmt.Sprintf("ok %d", gen); got != want {
		f.tb.Fatalf("replica %d writing the NodeSpecs: %q, want %q", i+1, got, want)
	}
	return time.Since(start)
}

// pushAll writes a change of the NodeSpecs of nodes 0..n-1 through replica i, moving
// them to generation gen, and measures until every agent acknowledged it, as the
// replicas count; the store, read back through replica i, must then hold every node at
// gen, observed. It returns the phase and how long writing took.
func (f *replicaFleet) pushAll(i, n int, gen int64) (p *fleetPhase, written time.Duration) {
	f.tb.Helper()
	p = f.startPhase()
	written = f.writeSpecs(i, n, gen)
	f.wait(fmt.Sprintf("every agent at generation %d", gen), func() bool { _, all := f.states(gen); return all.acked >= n })
	p.end()
	if got := f.replicas[i].ask("converged %d", n); got != strconv.Itoa(n) {
		f.tb.Errorf("after the push through replica %d, the store has %s of %d nodes at generation %d, observed", i+1, got, n, gen)
	}
	return p, written
}

// states are the replicas' states for generation gen (a killed one's is zero), and
// their sum.
func (f *replicaFleet) states(gen int64) (each [3]replicaState, all replicaState) {
	f.tb.Helper()
	for i := f.killed; i < len(f.replicas); i++ {
		s := &each[i]
		line := f.replicas[i].ask("state %d", gen)
		if _, err := fmt.Sscan(line, &s.sessions, &s.acked, &s.hs.Accepted, &s.hs.Resumed, &s.hs.Refused, &s.hs.Abandoned); err != nil {
			f.tb.Fatalf("replica %d state: %q: %v", i+1, line, err)
		}
		all.sessions += s.sessions
		all.acked += s.acked
	}
	return each, all
}

// wait polls cond every 100 ms for up to the fleet's timeout.
func (f *replicaFleet) wait(what string, cond func() bool) {
	f.tb.Helper()
	waitUntil(f.tb, what, f.timeout, 100*time.Millisecond, cond)
}

// cpu is the CPU time the replicas, the agents and the etcd members have used.
func (f *replicaFleet) cpu() [3]time.Duration {
	return [3]time.Duration{processesCPU(f.replicas), processesCPU(f.agents), pidsCPU(f.cluster.PIDs()...)}
}

// fleetPhase is one phase of the replica benchmark: its wall time and the CPU time of
// the replicas, the agents and the etcd members in it.
type fleetPhase struct {
	f        *replicaFleet
	start    time.Time
	startCPU [3]time.Duration
	wall     time.Duration
	cpu      [3]time.Duration
}

func (f *replicaFleet) startPhase() *fleetPhase {
	return &fleetPhase{f: f, start: time.Now(), startCPU: f.cpu()}
}

func (p *fleetPhase) end() {
	p.wall = time.Since(p.start)
	now := p.f.cpu()
	for i := range p.cpu {
		p.cpu[i] = now[i] - p.startCPU[i]
	}
}

// print shows the phase's time, its rate over n sessions, and the CPU per session of
// the replicas, the agents and the etcd members.
func (p *fleetPhase) print(name string, n int, what string) {
	per := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(max(n, 1)) }
	fmt.Printf("  %-10s %7.2fs %7.0f/s  CPU a session: replicas %.3f ms, agents %.3f ms, etcd %.3f ms  %s\n",
		name, p.wall.Seconds(), float64(n)/p.wall.Seconds(), per(p.cpu[0]), per(p.cpu[1]), per(p.cpu[2]), what)
}

func (r *replicaRun) print() {
	keepAlive := r.keepAlive
	if keepAlive == 0 {
		keepAlive = session.DefaultKeepAlive
	}
	fmt.Printf("replicas: %d sessions over three replica processes on a three-member etcd cluster, agents in %d processes, keep-alive %v\n", r.n, r.processes, keepAlive)
	r.connect.print("connect", r.n, "hello and acknowledgement of generation 1")
	r.push.print("push", r.n, fmt.Sprintf("NodeSpec change of every node written through replica 1 (in %.2fs) until every agent acknowledged it", r.written.Seconds()))
	r.kill.print("kill", r.before[0], fmt.Sprintf("replica 1 killed (SIGKILL) until its %d agents were back on replicas 2 and 3", r.before[0]))
	fmt.Printf("  kill: agents back %s; handshakes at replicas 2 and 3: %d, %d of them resumed, %d refused at admission, %d abandoned\n",
		&r.back, r.hs.Accepted, r.hs.Resumed, r.hs.Refused, r.hs.Abandoned)
	r.pushAgain.print("push again", r.n, fmt.Sprintf("NodeSpec change of every node written through replica 2 (in %.2fs) until every agent acknowledged it", r.writtenAgain.Seconds()))
	fmt.Printf("  sessions of replicas 1, 2, 3: before the kill %d, %d, %d; after %d, %d, %d\n", r.before[0], r.before[1], r.before[2], r.after[0], r.after[1], r.after[2])
	fmt.Printf("  store: %d keys, %.1f MiB of keys and values (each replica's mirror holds them); replicas 2 and 3 resident: %.0f and %.0f MiB\n",
		r.keys, float64(r.bytes)/(1<<20), float64(r.rss[1])/(1<<20), float64(r.rss[2])/(1<<20))
}
