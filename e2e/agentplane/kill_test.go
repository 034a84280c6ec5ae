package agentplane

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
)

// TestKillRegistryMidPush runs the registry in a child process, moves the NodeSpecs of
// 50 connected agents twice and kills the registry (SIGKILL) while it pushes them. A new
// registry process on the same store and address must bring every agent to the latest
// generation the store holds, and record it as observed.
func TestKillRegistryMidPush(t *testing.T) {
	const n = 50
	e, env := registryInChild(t)
	reg := startChild(t, "registry", env...)
	if got := reg.ask("specs %d r1", n); got != "ok 1" {
		t.Fatalf("specs: %q", got)
	}
	all := make([]*agent, n)
	for i := range all {
		all[i] = e.startAgent(nodeName(i), func(c *session.Config) {
			c.KeepAlive = 200 * time.Millisecond
			c.Backoff = session.Backoff{Min: 50 * time.Millisecond, Max: 500 * time.Millisecond}
		})
	}
	waitFor(t, "all agents at generation 1", func() bool { return reg.ask("converged %d", n) == strconv.Itoa(n) })

	if got := reg.ask("specs %d r2", n); got != "ok 2" {
		t.Fatalf("specs: %q", got)
	}
	fmt.Fprintf(reg.stdin, "specs %d r3\n", n)
	time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
	reg.kill()

	reg = startChild(t, "registry", env...)
	latest, err := strconv.ParseInt(reg.ask("generation"), 10, 64)
	if err != nil || latest < 2 {
		t.Fatalf("generation after the kill: %d, %v", latest, err)
	}
	waitFor(t, "every agent at the latest generation", func() bool {
		for _, a := range all {
			if a.ObservedGeneration() != latest || a.lastApplied().Generation != latest {
				return false
			}
		}
		return reg.ask("converged %d", n) == strconv.Itoa(n)
	})
}

// TestCrashNoticedAtNextPing kills the registry (SIGKILL) under an agent whose
// keep-alive period is 2 s and starts it again at once: the restarted registry answers the
// agent's next ping with a stateless reset, so the agent is back within about one period,
// not after its idle timeout of four (8 s).
func TestCrashNoticedAtNextPing(t *testing.T) {
	e, env := registryInChild(t)
	reg := startChild(t, "registry", env...)
	reg.ask("specs 1 r1")
	e.startAgent(nodeName(0), func(c *session.Config) {
		c.KeepAlive = 2 * time.Second
		c.Backoff = session.Backoff{Min: 50 * time.Millisecond, Max: 500 * time.Millisecond}
	})
	waitFor(t, "the agent at generation 1", func() bool { return reg.ask("converged 1") == "1" })
	time.Sleep(3 * time.Second) // past the handshake's last packets, into the keep-alive rhythm

	reg.kill()
	killed := time.Now()
	reg = startChild(t, "registry", env...)
	if got := reg.ask("specs 1 r2"); got != "ok 2" {
		t.Fatalf("specs: %q", got)
	}
	waitFor(t, "the agent at generation 2", func() bool { return reg.ask("converged 1") == "1" })
	// Back in about 1 s with pings; with QUIC's keep-alive it took 9 s (the idle timeout
	// after the last packet heard).
	if back := time.Since(killed); back > 6*time.Second {
		t.Fatalf("the agent was back %v after the crash: it waited for its idle timeout", back.Round(time.Millisecond))
	}
}

// registryInChild makes an env whose registry is to run in a child process, which a test
// can kill: the env's own endpoint is stopped, its CA written for the child, and its
// agents pointed at a free loopback address. It returns the env and the environment to
// start the registry child with ("registry").
func registryInChild(t *testing.T) (*env, []string) {
	t.Helper()
	e := newEnv(t, agents.Config{})
	e.stop()
	writeCA(t, e.ca, e.dir)
	e.addr = freeUDP(t)
	return e, []string{"BC_DIR=" + e.dir, "BC_ADDR=" + e.addr}
}

func nodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// freeUDP returns a loopback UDP address nothing listens on now.
func freeUDP(t testing.TB) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// runRegistryChild is a registry process: a store in BC_DIR, or, with BC_ETCD (client
// URLs separated by commas), in that etcd cluster under the prefix BC_ETCD_PREFIX, as one
// replica of several; and an agent endpoint on BC_ADDR. It is driven by requests on
// stdin:
//
//	specs N ROUND   set the NodeSpecs of nodes 0..N-1 (label round=ROUND), 100 a
//	                transaction, 8 transactions at a time; answers "ok GENERATION"
//	generation      the generation of node 0's spec
//	converged N     how many of nodes 0..N-1 observed their spec's generation
//	state G         "SESSIONS ACKED ACCEPTED RESUMED REFUSED ABANDONED": the sessions
//	                held now, how many nodes' acknowledgements of generation G this
//	                endpoint recorded in the store, and its handshake counts
func runRegistryChild() int {
	dir := os.Getenv("BC_DIR")
	ca, server, err := readServer(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var st *store.Store
	if endpoints := os.Getenv("BC_ETCD"); endpoints != "" {
		st, err = store.OpenEtcd(store.EtcdConfig{Endpoints: strings.Split(endpoints, ","), Prefix: os.Getenv("BC_ETCD_PREFIX")}, store.Options{})
	} else {
		st, err = store.Open(dir, store.Options{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer st.Close()
	var acked ackedNodes
	ep, err := agents.Start(agents.Config{Listen: os.Getenv("BC_ADDR"), Certificate: server, AgentCAs: ca.Pool(), Store: st, Log: slog.New(slog.DiscardHandler), OnObserved: acked.add})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ep.Close()
	fmt.Println("ready")
	requests(func(f []string) string {
		n := 0
		if len(f) > 1 {
			n, _ = strconv.Atoi(f[1])
		}
		switch f[0] {
		case "specs":
			var (
				gen    atomic.Int64
				failed atomic.Pointer[error]
				wg     sync.WaitGroup
			)
			writers := make(chan struct{}, specsWriters)
			for first := 0; first < n; first += specsPerTransaction {
				writers <- struct{}{}
				wg.Go(func() {
					defer func() { <-writers }()
					err := st.Update(func(tx *store.Tx) error {
						for i := first; i < min(first+specsPerTransaction, n); i++ {
							spec, err := tx.SetNodeSpec(proto.NodeSpec{Node: nodeName(i), Role: proto.RoleNode, Labels: map[string]string{"round": f[2]}})
							if err != nil {
								return err
							}
							gen.Store(spec.Generation)
						}
						return nil
					})
					if err != nil {
						failed.Store(&err)
					}
				})
			}
			wg.Wait()
			if err := failed.Load(); err != nil {
				return (*err).Error()
			}
			return fmt.Sprintf("ok %d", gen.Load())
		case "generation":
			var spec proto.NodeSpec
			st.View(func(tx *store.Tx) (err error) { spec, err = tx.NodeSpec(nodeName(0)); return err })
			return strconv.FormatInt(spec.Generation, 10)
		case "converged":
			done := 0
			st.View(func(tx *store.Tx) error {
				for i := range n {
					spec, _ := tx.NodeSpec(nodeName(i))
					status, _ := tx.AgentStatus(nodeName(i))
					if spec.Generation > 0 && status.ObservedGeneration == spec.Generation {
						done++
					}
				}
				return nil
			})
			return strconv.Itoa(done)
		case "state":
			h := ep.Handshakes()
			return fmt.Sprintf("%d %d %d %d %d %d", ep.Sessions(), acked.count(int64(n)), h.Accepted, h.Resumed, h.Refused, h.Abandoned)
		}
		return "unknown request"
	})
	return 0
}

// specsPerTransaction is how many NodeSpecs the registry child writes a transaction, as
// BenchmarkNodeSpecFanOut does: one etcd transaction holds a few thousand writes at most
// (etcd's --max-txn-ops; the store's nestOps). TestKillRegistryMidPush's 50 nodes are
// one transaction, so a kill leaves them all at one generation. specsWriters
// transactions run at a time, as the API's callers would make them: on etcd each reads
// its keys one by one, a round trip each, and one at a time 10,000 specs took tens of
// seconds on the loaded development machine.
const (
	specsPerTransaction = 100
	specsWriters        = 8
)

// ackedNodes are the nodes whose acknowledgement of each generation an endpoint recorded
// (its OnObserved hook): each node once, however often it said so.
type ackedNodes struct {
	mu    sync.Mutex
	nodes map[int64]map[string]bool
}

func (a *ackedNodes) add(node string, generation int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nodes == nil {
		a.nodes = map[int64]map[string]bool{}
	}
	if a.nodes[generation] == nil {
		a.nodes[generation] = map[string]bool{}
	}
	a.nodes[generation][node] = true
}

func (a *ackedNodes) count(generation int64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.nodes[generation])
}
