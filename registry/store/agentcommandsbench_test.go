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
				if err := tx.putAgentCommand(c); err != nil {
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

// benchDayOfAnswers times, on each backend over a day of answers (storeDayOfAnswers),
// one transaction done our way against its peer ("bucket walk"): txn(s, i, ours) runs
// the i-th, on s, our way when ours is set. Each of pairRounds rounds runs both, ours
// first in even rounds and the peer first in odd ones (ours pairRuns times, its mean
// taken: one is too short to time alone); it reports the median of the rounds' ratios
// (the peer's time over ours) with their minimum and maximum, and each side's median
// time (docs/benchmarks.md, "How every ratio is taken"; testkit.RunPairs, which this
// package's tests cannot import, does the same).
func benchDayOfAnswers(b *testing.B, txn func(s *Store, i int, ours bool) error) {
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
			timed := func(ours bool, runs int) float64 {
				start := time.Now()
				for range runs {
					if err := txn(s, i, ours); err != nil {
						b.Fatal(err)
					}
					i++
				}
				return float64(time.Since(start)) / float64(runs)
			}
			for b.Loop() {
				var ours, peer, ratios []float64
				for r := range pairRounds {
					if r%2 == 0 {
						ours, peer = append(ours, timed(true, pairRuns)), append(peer, timed(false, 1))
					} else {
						peer, ours = append(peer, timed(false, 1)), append(ours, timed(true, pairRuns))
					}
					ratios = append(ratios, peer[r]/ours[r])
				}
				median := func(v []float64) float64 { return slices.Sorted(slices.Values(v))[len(v)/2] }
				b.ReportMetric(median(ratios), "ratio-median")
				b.ReportMetric(slices.Min(ratios), "ratio-min")
				b.ReportMetric(slices.Max(ratios), "ratio-max")
				b.Logf("%d records, %.1f MiB: ours/bucket walk %.0f (min %.0f, max %.0f) over %d alternating rounds; medians: ours %.3g ms, bucket walk %.3g ms",
					records, float64(size)/(1<<20), median(ratios), slices.Min(ratios), slices.Max(ratios), pairRounds, median(ours)/1e6, median(peer)/1e6)
			}
		})
	}
}

// BenchmarkRunEndDropsPending is a run's end over a day of answers (benchDayOfAnswers):
// the transaction that drops the run's commands still pending (two: one for its node,
// one for its rack's site agent) with DropPendingAgentCommands, which reads the range of
// each agent's commands under the run's id; beside its peer, the same transaction
// dropping them as DropPendingAgentCommands did before, walking and decoding the whole
// agent-commands bucket.
func BenchmarkRunEndDropsPending(b *testing.B) {
	benchDayOfAnswers(b, func(s *Store, i int, ours bool) error {
		node, site, run := dayNode(i%dayNodes), dayRack(i%dayNodes), fmt.Sprintf("wf_%016x", i%dayNodes)
		return s.Update(func(tx *Tx) error {
			for _, agent := range []string{node, site} {
				if _, err := tx.EnqueueAgentCommand(agent, proto.RoleRamdisk, proto.Command{ID: run + ":cleanup.0:a1", Kind: "echo"}, nil); err != nil {
					return err
				}
			}
			dropped := 0
			var err error
			if ours {
				for _, agent := range []string{node, site} {
					var n int
					n, err = tx.DropPendingAgentCommands(agent, run+":")
					if dropped += n; err != nil {
						break
					}
				}
			} else {
				dropped, err = tx.dropAgentCommands(nil, func(c AgentCommand) bool { return !c.Done && strings.HasPrefix(c.ID, run+":") })
			}
			if err == nil && dropped != 2 {
				err = fmt.Errorf("dropped %d commands of %s, want 2", dropped, run)
			}
			return err
		})
	})
}

// BenchmarkExpiryReadsItsEntries is the daily expiry of relayed commands over a day of
// answers (benchDayOfAnswers), of which two commands made a day before it (one for a
// node, one for its rack's site agent) have expired: the transaction of
// ExpireAgentCommands, which reads the entries of agent-commands-by-expiry older than
// the cutoff and their records; beside its peer, the same transaction forgetting them
// as ExpireAgentCommands did before, walking and decoding the whole agent-commands
// bucket. Each side first stores the two expired commands, in a transaction of its own
// timed with it.
func BenchmarkExpiryReadsItsEntries(b *testing.B) {
	benchDayOfAnswers(b, func(s *Store, i int, ours bool) error {
		made := time.Now().Add(-25 * time.Hour)
		cutoff := made.Add(time.Hour)
		err := s.Update(func(tx *Tx) error {
			for _, agent := range []string{dayNode(i % dayNodes), dayRack(i % dayNodes)} {
				c := AgentCommand{Node: agent, Role: proto.RoleRamdisk, ID: fmt.Sprintf("old-%d", i), Kind: "echo", CreatedAt: made}
				if err := tx.putAgentCommand(c); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		return s.Update(func(tx *Tx) (err error) {
			var n int
			if ours {
				n, err = tx.ExpireAgentCommands(cutoff)
			} else {
				n, err = tx.dropAgentCommands(nil, func(c AgentCommand) bool { return c.CreatedAt.Before(cutoff) })
			}
			if err == nil && n != 2 {
				err = fmt.Errorf("expired %d commands, want 2", n)
			}
			return err
		})
	})
}
