package store

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestRunInvariants(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		var run Run
		mustUpdate(t, s, func(tx *Tx) (err error) {
			run, err = tx.CreateRun(Run{Kind: "deploy", Node: "nd_1", Steps: []RunStep{{Phase: "main", Index: 0}, {Phase: "cleanup", Index: 0}}})
			return err
		})
		if run.State != RunRunning || run.Rev != 1 || run.Steps[0].State != StepPending {
			t.Fatalf("created %+v", run)
		}
		update := func(change func(*Run) error) error {
			return s.Update(func(tx *Tx) error { _, err := tx.UpdateRun(run.ID, change); return err })
		}
		running := func() []string {
			var ids []string
			s.View(func(tx *Tx) (err error) { ids, err = tx.RunningRuns(); return err })
			return ids
		}
		if diff := cmp.Diff([]string{run.ID}, running()); diff != "" {
			t.Errorf("running (-want +got):\n%s", diff)
		}
		if err := update(func(r *Run) error { r.Steps[0].State = StepSucceeded; return nil }); err != nil {
			t.Fatal(err)
		}
		cases := map[string]struct {
			change func(*Run) error
			code   proto.Code
		}{
			"a done step changes":  {func(r *Run) error { r.Steps[0].State = StepRunning; return nil }, proto.Internal},
			"a step is added":      {func(r *Run) error { r.Steps = append(r.Steps, RunStep{}); return nil }, proto.Internal},
			"an unknown run state": {func(r *Run) error { r.State = "paused"; return nil }, proto.Internal},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				if err := update(tc.change); proto.CodeOf(err) != tc.code {
					t.Fatalf("got %v, want %s", err, tc.code)
				}
			})
		}
		if err := update(func(r *Run) error { r.State = RunSucceeded; return nil }); err != nil {
			t.Fatal(err)
		}
		if err := update(func(r *Run) error { return nil }); proto.CodeOf(err) != proto.InvalidState {
			t.Errorf("changing a finished run: %v", err)
		}
		if got := running(); len(got) != 0 {
			t.Errorf("still running: %v", got)
		}
		s.View(func(tx *Tx) error {
			r, err := tx.Run(run.ID)
			if err != nil || r.Rev != 3 || r.FinishedAt.IsZero() {
				t.Errorf("finished run %+v %v", r, err)
			}
			if _, err := tx.Run("wf_nope"); proto.CodeOf(err) != proto.NotFound {
				t.Errorf("unknown run: %v", err)
			}
			return nil
		})
		if err := s.Update(func(tx *Tx) error { _, err := tx.CreateRun(Run{}); return err }); proto.CodeOf(err) != proto.InvalidInput {
			t.Errorf("a run without steps: %v", err)
		}
	})
}
