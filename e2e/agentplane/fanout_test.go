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
// watch). It reports both and the ratio (three replicas over bbolt).
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
	took := make([]time.Duration, len(setups))
	for j, s := range setups {
		envs := s.envs()
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
		count := func(f func(*agents.Endpoint) int64) (sum int64) {
			for _, e := range envs {
				sum += f(e.ep)
			}
			return sum
		}
		testkit.WaitFor(b, fmt.Sprintf("%d sessions (%s)", n, s.name), 5*time.Minute, 50*time.Millisecond, func() bool {
			return count(func(ep *agents.Endpoint) int64 { return int64(ep.Sessions()) }) == int64(n)
		})
		for i := range b.N {
			acked := count(func(ep *agents.Endpoint) int64 { return ep.Pushes().Acked })
			start := time.Now()
			for k := 0; k < n; k += 100 {
				err := envs[0].st.Update(func(tx *store.Tx) error {
					for m := k; m < min(k+100, n); m++ {
						spec := proto.NodeSpec{Node: fmt.Sprintf("fan-%d", m), Role: proto.RoleNode, Labels: map[string]string{"round": strconv.Itoa(i)}}
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
			testkit.WaitFor(b, fmt.Sprintf("%d acks (%s)", n, s.name), 5*time.Minute, 10*time.Millisecond, func() bool {
				return count(func(ep *agents.Endpoint) int64 { return ep.Pushes().Acked })-acked >= int64(n)
			})
			took[j] += time.Since(start)
		}
	}
	for j, s := range setups {
		b.ReportMetric(float64(took[j].Milliseconds())/float64(b.N), s.name+"-fanout-ms")
	}
	b.ReportMetric(float64(took[1])/float64(took[0]), "etcd3/bbolt")
}
