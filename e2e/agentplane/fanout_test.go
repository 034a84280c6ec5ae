package agentplane

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// BenchmarkNodeSpecFanOut measures the time from writing a new NodeSpec for each of
// BC_FANOUT_AGENTS agents (1,000 by default; in-process agent sessions over loopback QUIC)
// until every agent has acknowledged it: with one registry endpoint on bbolt holding
// every session, and with three replicas on a three-member etcd cluster holding a third
// each, one replica writing every NodeSpec (the others learn of them through the store's
// watch). Both fleets are up together; PairRounds alternating rounds push through each
// (bbolt first in odd rounds), and it reports each side's median time and the median
// ratio (three replicas over bbolt) with its minimum and maximum.
func BenchmarkNodeSpecFanOut(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("BC_FANOUT_AGENTS")); err == nil && v > 0 {
		n = v
	}
	setups := []struct {
		name string
		envs func() []*env
	}{
		{"bbolt", func() []*env { return []*env{newEnv(b, agents.Config{})} }},
		{"etcd3", func() []*env { return etcdReplicas(b, 3) }},
	}
	fleets := make([][]*env, len(setups))
	for j, s := range setups {
		envs := s.envs()
		fleets[j] = envs
		var addrs []string
		for _, e := range envs {
			addrs = append(addrs, e.addr)
		}
		for k := range n {
			e := envs[k%len(envs)]
			e.startAgent(fmt.Sprintf("fan-%d", k), func(c *session.Config) {
				c.Addr, c.Addrs, c.KeepAlive = e.addr, addrs, 5*time.Second
				c.Backoff = session.Backoff{Min: 200 * time.Millisecond, Max: 2 * time.Second}
			})
		}
		testkit.WaitFor(b, fmt.Sprintf("%d sessions (%s)", n, s.name), 5*time.Minute, 50*time.Millisecond, func() bool {
			return sum(envs, func(ep *agents.Endpoint) int64 { return int64(ep.Sessions()) }) == int64(n)
		})
	}
	round := 0
	push := func(j int) float64 {
		envs := fleets[j]
		round++
		acked := sum(envs, func(ep *agents.Endpoint) int64 { return ep.Pushes().Acked })
		start := time.Now()
		for k := 0; k < n; k += 100 {
			err := envs[0].st.Update(func(tx *store.Tx) error {
				for m := k; m < min(k+100, n); m++ {
					spec := proto.NodeSpec{Node: fmt.Sprintf("fan-%d", m), Role: proto.RoleNode, Labels: map[string]string{"round": strconv.Itoa(round)}}
					if _, err := tx.SetNodeSpec(spec); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		testkit.WaitFor(b, fmt.Sprintf("%d acks (%s)", n, setups[j].name), 5*time.Minute, 10*time.Millisecond, func() bool {
			return sum(envs, func(ep *agents.Endpoint) int64 { return ep.Pushes().Acked })-acked >= int64(n)
		})
		return float64(time.Since(start).Milliseconds())
	}
	for range b.N {
		p := testkit.RunPairs(testkit.PairRounds(b), testkit.OursOverPeer, func() float64 { return push(1) }, func() float64 { return push(0) })
		b.ReportMetric(testkit.Median(p.Peer), "bbolt-fanout-ms")
		b.ReportMetric(testkit.Median(p.Ours), "etcd3-fanout-ms")
		p.Report(b, "etcd3/bbolt-", fmt.Sprintf("NodeSpec fan-out to %d agents, three replicas on etcd over one registry on bbolt (time)", n), "etcd3", "bbolt", "ms")
	}
}

// sum adds f of every env's endpoint.
func sum(envs []*env, f func(*agents.Endpoint) int64) (total int64) {
	for _, e := range envs {
		total += f(e.ep)
	}
	return total
}
