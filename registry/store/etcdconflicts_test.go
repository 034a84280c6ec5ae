package store

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// BenchmarkEtcdFleetConflicts has three replicas on one cluster run deploys at once, as
// a fleet's workflows do: each of 12 workers, 4 a replica, creates a run, relays a
// command to its node's agent and one to its rack's site agent (shared by the workers of
// two racks), answers both, records them (RecordAgentCommands, a scan of the attempt's
// commands) and ends the run (a deletion from workflows_running); replica 0's
// housekeeping walks every command (ExpireAgentCommands) every 20 of its first worker's
// deploys. It reports the transactions run again per transaction committed, and logs
// the conflicts by cause (docs/store.md, "Transactions").
func BenchmarkEtcdFleetConflicts(b *testing.B) {
	const workers = 4
	stores := openReplicas(b, EtcdConfig{Endpoints: etcdtest.Shared(b).Endpoints, Prefix: etcdtest.Prefix(b)}, 3)
	var wg sync.WaitGroup
	for s, st := range stores {
		for w := range workers {
			wg.Go(func() {
				node, site := fmt.Sprintf("n-%d-%d", s, w), fmt.Sprintf("site-%d", w%2)
				for i := range b.N {
					deploy(b, st, node, site, i)
					if s == 0 && w == 0 && i%20 == 19 {
						if err := st.Update(func(tx *Tx) error { _, err := tx.ExpireAgentCommands(tx.Now().Add(-time.Hour)); return err }); err != nil {
							b.Error(err)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	var commits, reruns int64
	by := map[Conflict]int64{}
	for _, st := range stores {
		s, _ := st.TxStats()
		commits += s.Commits
		for c, n := range s.Conflicts {
			by[c] += n
			reruns += n
		}
	}
	for _, c := range slices.SortedFunc(maps.Keys(by), func(a, b Conflict) int { return int(by[b] - by[a]) }) {
		b.Logf("%s %s: %d", c.Bucket, c.Kind, by[c])
	}
	b.Logf("%d transactions committed, %d runs again", commits, reruns)
	b.ReportMetric(float64(reruns)/float64(commits), "reruns/commit")
}

// deploy runs one deploy's transactions on st: node's run, its commands to node and
// site, their answers and their recording.
func deploy(tb testing.TB, st *Store, node, site string, i int) {
	tb.Helper()
	var run Run
	attempt := fmt.Sprintf("%s.a%d", node, i)
	steps := []func(tx *Tx) error{
		func(tx *Tx) (err error) {
			run, err = tx.CreateRun(Run{Document: json.RawMessage(`{}`), Steps: []RunStep{{Phase: "steps", Use: "deploy.deploy"}}})
			return err
		},
		func(tx *Tx) error {
			if _, err := tx.EnqueueAgentCommand(node, proto.RoleRamdisk, proto.Command{ID: attempt, Kind: "deploy.deploy"}, nil); err != nil {
				return err
			}
			_, err := tx.EnqueueAgentCommand(site, proto.RoleSite, proto.Command{ID: attempt + ":pxe", Kind: "boot.pxe"}, nil)
			return err
		},
		func(tx *Tx) error {
			_, err := tx.CompleteAgentCommand(node, proto.Result{ID: attempt, Result: json.RawMessage(`{"ok":true}`)})
			return err
		},
		func(tx *Tx) error {
			_, err := tx.CompleteAgentCommand(site, proto.Result{ID: attempt + ":pxe", Result: json.RawMessage(`{"ok":true}`)})
			return err
		},
		func(tx *Tx) error {
			for _, agent := range []string{node, site} {
				if _, err := tx.RecordAgentCommands(agent, attempt, run.ID, "steps[0]"); err != nil {
					return err
				}
			}
			_, err := tx.UpdateRun(run.ID, func(r *Run) error {
				r.Steps[0].State, r.State = StepSucceeded, RunSucceeded
				return nil
			})
			return err
		},
	}
	for _, step := range steps {
		if err := st.Update(step); err != nil {
			tb.Error(err)
			return
		}
	}
}
