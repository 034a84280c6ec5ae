package agentplane

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
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

// runRegistryChild is a registry process: a store in BC_DIR and an agent endpoint on
// BC_ADDR, driven by requests on stdin:
//
//	specs N ROUND   set the NodeSpecs of nodes 0..N-1 (label round=ROUND) in one
//	                transaction; answers "ok GENERATION"
//	generation      the generation of node 0's spec
//	converged N     how many of nodes 0..N-1 observed their spec's generation
func runRegistryChild() int {
	dir := os.Getenv("BC_DIR")
	ca, server, err := readServer(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer st.Close()
	ep, err := agents.Start(agents.Config{Listen: os.Getenv("BC_ADDR"), Certificate: server, AgentCAs: ca.Pool(), Store: st, Log: slog.New(slog.DiscardHandler)})
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
			var gen int64
			err := st.Update(func(tx *store.Tx) error {
				for i := range n {
					spec, err := tx.SetNodeSpec(proto.NodeSpec{Node: nodeName(i), Role: proto.RoleNode, Labels: map[string]string{"round": f[2]}})
					if err != nil {
						return err
					}
					gen = spec.Generation
				}
				return nil
			})
			if err != nil {
				return err.Error()
			}
			return fmt.Sprintf("ok %d", gen)
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
		}
		return "unknown request"
	})
	return 0
}
