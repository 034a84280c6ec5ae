package store

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// TestFinishedRunsArePrunedAfterTheirRetention: a fleet's finished runs are kept
// RunRetention after their end and then pruned, MaxPruned entries a transaction, reading
// only the entries of the runs it prunes; a run still running, one younger than the
// retention and those the node's record names (its last workflow, the one it failed in,
// its last remediation) stay, the latter until the node names them no more and another
// retention passed. A claim left behind goes with its run, and the store stays
// consistent. Before, every run was kept for ever: a fleet deploying each node once a
// week kept 52 runs a node a year, and on etcd every replica's mirror held them all.
func TestFinishedRunsArePrunedAfterTheirRetention(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		var node Node
		mustUpdate(t, s, func(tx *Tx) (err error) {
			if _, err = tx.CreateTenant("acme"); err != nil {
				return err
			}
			if _, err = tx.CreateSite("rack-a"); err != nil {
				return err
			}
			if _, err = tx.CreatePool(Pool{Tenant: "acme", Name: "gpu", Site: "rack-a"}); err != nil {
				return err
			}
			node, err = tx.CreateNode(Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}, State: NodeReady})
			return err
		})
		// runs makes n runs of the node, each ended unless running says otherwise, 100 a
		// transaction, and returns their ids.
		runs := func(n int, running bool) []string {
			var ids []string
			for len(ids) < n {
				mustUpdate(t, s, func(tx *Tx) error {
					for range min(100, n-len(ids)) {
						r, err := tx.CreateRun(Run{Kind: "deploy", Node: node.ID, Document: json.RawMessage(`{}`), Steps: []RunStep{{Phase: "main"}}})
						if err != nil {
							return err
						}
						if !running {
							if _, err = tx.UpdateRun(r.ID, func(r *Run) error { r.State = RunSucceeded; return nil }); err != nil {
								return err
							}
						}
						ids = append(ids, r.ID)
					}
					return nil
				})
			}
			return ids
		}
		old := runs(MaxPruned+5, false)
		named := runs(3, false)
		stillRunning := runs(1, true)
		mustUpdate(t, s, func(tx *Tx) error {
			if _, err := tx.ClaimRun(old[0], Holder{Replica: "r1", Started: clk.Now()}, time.Minute); err != nil {
				return err
			}
			_, err := tx.UpdateNode(node.ID, func(n *Node) error {
				n.State, n.FailedFrom, n.Workflow = NodeFailed, NodeActive, named[0]
				n.Failure = &StepFailure{RunID: named[1], Step: "steps[0]", Use: "power.setPower"}
				n.Remediation = &Remediation{Workflow: named[2], Reason: "operator", At: clk.Now()}
				return nil
			})
			return err
		})
		clk.Advance(RunRetention - time.Hour)
		young := runs(1, false)
		clk.Advance(2 * time.Hour)

		var passes []int
		prune := func() int {
			passes = passes[:0]
			total, err := s.Prune(func(tx *Tx) (int, error) {
				n, err := tx.PruneRuns(tx.Now().Add(-RunRetention))
				passes = append(passes, n)
				return n, err
			})
			if err != nil {
				t.Fatal(err)
			}
			return total
		}
		stored := func(ids []string) (out []string) {
			s.View(func(tx *Tx) error {
				for _, id := range ids {
					if _, err := tx.Run(id); err == nil {
						out = append(out, id)
					}
				}
				return nil
			})
			return out
		}
		if total := prune(); total != len(old)+len(named) || slices.Max(passes) > MaxPruned {
			t.Fatalf("pruned %d entries in passes of %v, want %d in passes of at most %d", total, passes, len(old)+len(named), MaxPruned)
		}
		if got := stored(old); len(got) != 0 {
			t.Errorf("%d of %d runs ended a retention ago are kept: %v...", len(got), len(old), got[:min(3, len(got))])
		}
		kept := slices.Concat(named, stillRunning, young)
		if got := stored(kept); !slices.Equal(got, kept) {
			t.Errorf("kept %v, want the runs the node names, the running one and the young one: %v", got, kept)
		}
		s.View(func(tx *Tx) error {
			if _, held, _ := tx.RunClaim(old[0]); held {
				t.Errorf("the claim of pruned run %s is left behind", old[0])
			}
			return nil
		})
		if err := s.Check(); err != nil {
			t.Errorf("store check after the prune: %v", err)
		}

		// The node moves on: the runs it named go a retention after they were last
		// looked at; the young one, which it names now, stays.
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.UpdateNode(node.ID, func(n *Node) error {
				n.State, n.FailedFrom, n.Failure, n.Remediation, n.Workflow = NodeActive, "", nil, nil, young[0]
				return nil
			})
			return err
		})
		clk.Advance(RunRetention + time.Hour)
		if total := prune(); total != len(named)+len(young) {
			t.Errorf("second prune read %d entries, want %d: the runs the node named and the young one", total, len(named)+len(young))
		}
		if got := stored(kept); !slices.Equal(got, slices.Concat(stillRunning, young)) {
			t.Errorf("kept %v once the node names only %s, want %v", got, young[0], slices.Concat(stillRunning, young))
		}
		if err := s.Check(); err != nil {
			t.Errorf("store check after the second prune: %v", err)
		}
	})
}

// TestRunsEndedUnderAnEarlierReleaseAreIndexed: the runs that ended without an entry in
// workflows_by_end (an earlier release wrote none) get theirs at their end as
// IndexEndedRuns walks the runs, runsIndexedChunk a transaction, once: then they are
// pruned as every run is. A running run gets none (its end writes it), the walk reads
// nothing once done, and the store stays consistent.
func TestRunsEndedUnderAnEarlierReleaseAreIndexed(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		var ended []string
		var running string
		mustUpdate(t, s, func(tx *Tx) error {
			for i := range 2*runsIndexedChunk + 5 {
				r, err := tx.CreateRun(Run{Kind: "deploy", Node: "nd_1", Document: json.RawMessage(`{}`), Steps: []RunStep{{Phase: "main"}}})
				if err != nil {
					return err
				}
				if i == 0 {
					running = r.ID
					continue
				}
				if r, err = tx.UpdateRun(r.ID, func(r *Run) error { r.State = RunFailed; return nil }); err != nil {
					return err
				}
				// As an earlier release ended it: without its entry.
				if err := tx.del(bucketRunsByEnd, runEndKey(r.FinishedAt, r.ID)); err != nil {
					return err
				}
				ended = append(ended, r.ID)
			}
			return nil
		})
		clk.Advance(RunRetention + time.Hour)
		if n, err := s.Prune(func(tx *Tx) (int, error) { return tx.PruneRuns(tx.Now().Add(-RunRetention)) }); err != nil || n != 0 {
			t.Fatalf("before the walk the prune read %d entries (%v), want none", n, err)
		}
		walks := 0
		for done := false; !done; walks++ {
			mustUpdate(t, s, func(tx *Tx) (err error) { done, err = tx.IndexEndedRuns(); return err })
		}
		if want := (2*runsIndexedChunk+5)/runsIndexedChunk + 1; walks != want {
			t.Errorf("the walk took %d transactions, want %d", walks, want)
		}
		if err := s.Check(); err != nil {
			t.Errorf("store check after the walk: %v", err)
		}
		n, err := s.Prune(func(tx *Tx) (int, error) { return tx.PruneRuns(tx.Now().Add(-RunRetention)) })
		if err != nil || n != len(ended) {
			t.Fatalf("the prune after the walk read %d entries (%v), want %d", n, err, len(ended))
		}
		s.View(func(tx *Tx) error {
			for _, id := range ended {
				if _, err := tx.Run(id); err == nil {
					t.Errorf("run %s, ended a retention ago under an earlier release, is kept", id)
				}
			}
			if _, err := tx.Run(running); err != nil {
				t.Errorf("the running run: %v", err)
			}
			return nil
		})
		mustUpdate(t, s, func(tx *Tx) error {
			done, err := tx.IndexEndedRuns()
			if !done {
				t.Errorf("the walk, done, walks again")
			}
			return err
		})
		if err := s.Check(); err != nil {
			t.Errorf("store check after the prune: %v", err)
		}
	})
}

// TestRunsOfSignedResultsAreKeptOverAYear: a run that ran a step whose result the
// machine signs (a disk.wipe's attestation, a diag.dcgm's) is the proof an auditor asks
// for a year on: it is kept SignedRunRetention after its end, whether its end wrote its
// entry or the walk of runs ended under an earlier release did, while a run of other
// steps goes after RunRetention. Before, every run went after RunRetention, the wipe's
// attestation with it.
func TestRunsOfSignedResultsAreKeptOverAYear(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		var plain, signed []string
		mustUpdate(t, s, func(tx *Tx) error {
			for i, use := range []string{"power.setPower", "disk.wipe", "diag.dcgm", "disk.wipe"} {
				r, err := tx.CreateRun(Run{Kind: "release", Node: "nd_1", Document: json.RawMessage(`{}`),
					Steps: []RunStep{{Phase: "main", Use: "metal.ensureRamdisk"}, {Phase: "main", Index: 1, Use: use}}})
				if err != nil {
					return err
				}
				if r, err = tx.UpdateRun(r.ID, func(r *Run) error { r.State = RunSucceeded; return nil }); err != nil {
					return err
				}
				if i == 3 { // as an earlier release ended it: without its entry
					if err := tx.del(bucketRunsByEnd, runEndKey(pruneFrom(r.FinishedAt, stepUses(r.Steps)), r.ID)); err != nil {
						return err
					}
				}
				if i == 0 {
					plain = append(plain, r.ID)
				} else {
					signed = append(signed, r.ID)
				}
			}
			return nil
		})
		for done := false; !done; {
			mustUpdate(t, s, func(tx *Tx) (err error) { done, err = tx.IndexEndedRuns(); return err })
		}
		stored := func() (out []string) {
			s.View(func(tx *Tx) error {
				for _, id := range slices.Concat(plain, signed) {
					if _, err := tx.Run(id); err == nil {
						out = append(out, id)
					}
				}
				return nil
			})
			return out
		}
		prune := func() {
			if _, err := s.Prune(func(tx *Tx) (int, error) { return tx.PruneRuns(tx.Now().Add(-RunRetention)) }); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(RunRetention + time.Hour)
		prune()
		if got := stored(); !slices.Equal(got, signed) {
			t.Errorf("a retention after their end, kept %v; want the runs of signed results %v", got, signed)
		}
		clk.Advance(SignedRunRetention - RunRetention)
		prune()
		if got := stored(); len(got) != 0 {
			t.Errorf("a year and a month after their end, kept %v; want none", got)
		}
		if err := s.Check(); err != nil {
			t.Errorf("store check after the prunes: %v", err)
		}
	})
}
