package store

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// TestPrunesOfEveryCountFitOneTransaction: a pruning pass that reads its records by
// name, one each (a relayed command, the oldest event of each node, the claim and the
// node of each run), commits whatever it finds, on both backends. On etcd such a pass of
// about 120 records has nearly 128 compares, one a key read, which leaves the nested
// transactions holding its writes room for 1 to 4 each (etcd bounds a nested
// transaction to 128 less its parent's compares); before, a day that expired 124 or 125
// commands, or 124 or 125 nodes' events, or 62 runs of as many nodes, was refused as
// too large for one etcd transaction, and housekeeping failed until the count moved.
func TestPrunesOfEveryCountFitOneTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		prune := func(what string, n int, fn func(*Tx, []byte) (int, []byte, error)) {
			t.Helper()
			if got, err := s.PruneOnward(fn); err != nil || got != n {
				t.Fatalf("pruning %d %s: pruned %d, %v", n, what, got, err)
			}
		}
		for n := 118; n <= 130; n++ {
			mustUpdate(t, s, func(tx *Tx) error {
				for i := range n {
					cmd := proto.Command{ID: fmt.Sprintf("wf_%04d:main.%d:a1", n, i), Kind: "echo", Payload: json.RawMessage(`{}`)}
					if _, err := tx.EnqueueAgentCommand(fmt.Sprintf("nd_%d", i), proto.RoleRamdisk, cmd, nil); err != nil {
						return err
					}
					if _, err := tx.AppendEvent(Event{Node: fmt.Sprintf("nd_%d", i), Tenant: "acme", Kind: EventNodeState, To: NodeReady}); err != nil {
						return err
					}
				}
				return nil
			})
			clk.Advance(EventMaxAge + time.Hour)
			prune("commands", n, func(tx *Tx, _ []byte) (int, []byte, error) {
				n, err := tx.ExpireAgentCommands(tx.Now().Add(-time.Hour))
				return n, nil, err
			})
			prune("nodes' events", n, (*Tx).PruneEvents)
		}
		for n := 58; n <= 66; n++ {
			mustUpdate(t, s, func(tx *Tx) error {
				for i := range n {
					r, err := tx.CreateRun(Run{Kind: "deploy", Node: fmt.Sprintf("nd_%d", i), Document: json.RawMessage(`{}`), Steps: []RunStep{{Phase: "main"}}})
					if err != nil {
						return err
					}
					if _, err := tx.UpdateRun(r.ID, func(r *Run) error { r.State = RunSucceeded; return nil }); err != nil {
						return err
					}
				}
				return nil
			})
			clk.Advance(RunRetention + time.Hour)
			prune("runs of as many nodes", n, func(tx *Tx, _ []byte) (int, []byte, error) {
				n, err := tx.PruneRuns(tx.Now().Add(-RunRetention))
				return n, nil, err
			})
		}
	})
}
