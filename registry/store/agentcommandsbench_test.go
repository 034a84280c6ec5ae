package store

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// The fleet of a day of answers: 10,000 nodes in racks of 40, each deploying once, its
// relayed commands recorded (docs/store.md, "A day of answers").
const (
	dayNodes     = 10000
	nodesPerRack = 40
)

// storeDayOfAnswers writes into s the commands of dayNodes deploys as the store keeps them
// once their runs recorded them (recorded, as RecordAgentCommands writes them): each kind
// of commandRecords as often as a deploy relays it, a site command (proto.SiteCommand)
// under its rack's site agent, the others under the node. It returns how many, and the
// bytes of their keys and records.
func storeDayOfAnswers(tb testing.TB, s *Store) (records, size int) {
	tb.Helper()
	now := time.Now()
	kindsOf := commandRecords(tb)
	var kinds []AgentCommand
	for _, kind := range slices.Sorted(maps.Keys(kindsOf)) {
		c := kindsOf[kind]
		payload, _ := proto.Marshal(c.payload)
		result, _ := proto.Marshal(c.result)
		_, site := c.payload.(proto.SiteCommand)
		role := proto.RoleRamdisk
		if site {
			role = proto.RoleSite
		}
		for range c.count {
			kinds = append(kinds, recorded(AgentCommand{Role: role, Kind: kind, Payload: payload, CreatedAt: now, Done: true, Result: result, DoneAt: now},
				"", "steps[3]", now))
		}
	}
	var batch []AgentCommand
	flush := func() {
		err := s.Update(func(tx *Tx) error {
			for _, c := range batch {
				rec, err := encodeRecord(c)
				if err != nil {
					return err
				}
				key := commandKey(c.Node, c.ID)
				size += len(key) + len(rec)
				if err := tx.put(bucketAgentCommands, key, c); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range dayNodes {
		node, site, run := dayNode(i), dayRack(i), fmt.Sprintf("wf_%016x", i)
		for j, c := range kinds {
			c.Node, c.ID = node, fmt.Sprintf("%s:main.%d:a1", run, j)
			if c.Role == proto.RoleSite {
				c.Node = site
			}
			r := *c.Recorded
			r.Workflow = run
			c.Recorded = &r
			batch = append(batch, c)
		}
		if len(batch) >= 2000 {
			flush()
		}
	}
	flush()
	return dayNodes * len(kinds), size
}

func dayNode(i int) string { return fmt.Sprintf("nd_%016x", i) }
func dayRack(i int) string { return fmt.Sprintf("rack-%03d", i/nodesPerRack) }

// BenchmarkRunEndDropsPending is a run's end over a day of answers (storeDayOfAnswers):
// the transaction that drops the run's commands still pending (two: one for its node,
// one for its rack's site agent) with DropPendingAgentCommands, which reads the range of
// each agent's commands under the run's id; beside its peer, "bucket walk", the same
// transaction dropping them as DropPendingAgentCommands did before, walking and
// decoding the whole agent-commands bucket. Each of pairRounds rounds runs both, the
// range first in even rounds and the walk first in odd ones (the range pairRuns times,
// its mean taken: one is too short to time alone); it reports the median of the rounds'
// ratios (the walk's time over the range's) with their minimum and maximum, and each
// side's median time (docs/benchmarks.md, "How every ratio is taken"; testkit.RunPairs,
// which this package's tests cannot import, does the same).
func BenchmarkRunEndDropsPending(b *testing.B) {
	const pairRounds, pairRuns = 5, 20
	for _, backend := range testBackends {
		b.Run(backend.name, func(b *testing.B) {
			s, err := backend.place(b)(b, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			records, size := storeDayOfAnswers(b, s)
			i := 0
			end := func(drop func(tx *Tx, node, site, run string) (int, error)) {
				node, site, run := dayNode(i%dayNodes), dayRack(i%dayNodes), fmt.Sprintf("wf_%016x", i%dayNodes)
				i++
				err := s.Update(func(tx *Tx) error {
					for _, agent := range []string{node, site} {
						if _, err := tx.EnqueueAgentCommand(agent, proto.RoleRamdisk, proto.Command{ID: run + ":cleanup.0:a1", Kind: "echo"}, nil); err != nil {
							return err
						}
					}
					n, err := drop(tx, node, site, run)
					if err == nil && n != 2 {
						err = fmt.Errorf("dropped %d commands of %s, want 2", n, run)
					}
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			ranged := func() float64 {
				start := time.Now()
				for range pairRuns {
					end(func(tx *Tx, node, site, run string) (int, error) {
						dropped := 0
						for _, agent := range []string{node, site} {
							n, err := tx.DropPendingAgentCommands(agent, run+":")
							if dropped += n; err != nil {
								return dropped, err
							}
						}
						return dropped, nil
					})
				}
				return float64(time.Since(start)) / pairRuns
			}
			walk := func() float64 {
				start := time.Now()
				end(func(tx *Tx, _, _, run string) (int, error) {
					return tx.dropAgentCommands(nil, 0, func(c AgentCommand) bool { return !c.Done && strings.HasPrefix(c.ID, run+":") })
				})
				return float64(time.Since(start))
			}
			for b.Loop() {
				var ours, peer, ratios []float64
				for r := range pairRounds {
					if r%2 == 0 {
						ours, peer = append(ours, ranged()), append(peer, walk())
					} else {
						peer, ours = append(peer, walk()), append(ours, ranged())
					}
					ratios = append(ratios, peer[r]/ours[r])
				}
				median := func(v []float64) float64 { return slices.Sorted(slices.Values(v))[len(v)/2] }
				b.ReportMetric(median(ratios), "ratio-median")
				b.ReportMetric(slices.Min(ratios), "ratio-min")
				b.ReportMetric(slices.Max(ratios), "ratio-max")
				b.Logf("%d records, %.1f MiB: range/bucket walk %.0f (min %.0f, max %.0f) over %d alternating rounds; medians: range %.3g ms, bucket walk %.3g ms",
					records, float64(size)/(1<<20), median(ratios), slices.Min(ratios), slices.Max(ratios), pairRounds, median(ours)/1e6, median(peer)/1e6)
			}
		})
	}
}
