package store

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestRunInvariants(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		var run Run
		mustUpdate(t, s, func(tx *Tx) (err error) {
			run, err = tx.CreateRun(Run{Kind: "deploy", Node: "nd_1", Document: json.RawMessage(`{}`), Steps: []RunStep{{Phase: "main", Index: 0}, {Phase: "cleanup", Index: 0}}})
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

// TestRunRefersToAUsedVersion: a run without a document of its own refers to a stored
// version, which must be used: one of an unused or missing version is refused, writing
// nothing; RunDocument reads the version's document, or the run's own. A version whose
// record says it is used (marked before profiles_used) counts as used, is not replaced and
// is not marked again. Check reports a run whose version is gone.
func TestRunRefersToAUsedVersion(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, err := open(t, Options{}) // not openTest: this store is damaged on purpose
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ref := func(id string) ProfileRef { return ProfileRef{Tenant: "acme", ID: id, Version: 1} }
		newRun := func(id string) Run {
			return Run{Kind: "deploy", Node: "nd_1", Tenant: "acme", Profile: ref(id), Steps: []RunStep{{Phase: "main", Index: 0}}}
		}
		mustUpdate(t, s, func(tx *Tx) error {
			if _, err := tx.CreateProfile(ProfileRecord{Tenant: "acme", ID: "now", Version: 1, Document: profileDoc("now", 1)}); err != nil {
				return err
			}
			// A record of a version used before profiles_used, counted as the raise to
			// format 4 counts it.
			if err := tx.put(bucketProfiles, profileKey("acme", "before", 1), ProfileRecord{Tenant: "acme", ID: "before", Version: 1, Rev: 1, Used: true, Document: profileDoc("before", 1)}); err != nil {
				return err
			}
			return tx.recount([][]byte{countKey(countProfileVersions, "acme")})
		})
		for _, id := range []string{"now", "missing"} {
			if err := s.Update(func(tx *Tx) error { _, err := tx.CreateRun(newRun(id)); return err }); proto.CodeOf(err) != proto.Internal {
				t.Errorf("a run of version %s, not used: %v, want INTERNAL", id, err)
			}
		}
		var runs []Run
		mustUpdate(t, s, func(tx *Tx) error {
			if err := tx.MarkProfileUsed("acme", "now", 1); err != nil {
				return err
			}
			if err := tx.MarkProfileUsed("acme", "before", 1); err != nil {
				return err
			}
			for _, r := range []Run{newRun("now"), newRun("before"), {Kind: "deploy", Node: "nd_1", Profile: ProfileRef{Tenant: "builtin", ID: "shipped", Version: 1}, Document: profileDoc("shipped", 1), Steps: []RunStep{{Phase: "main"}}}} {
				r, err := tx.CreateRun(r)
				if err != nil {
					return err
				}
				runs = append(runs, r)
			}
			return nil
		})
		s.View(func(tx *Tx) error {
			for i, want := range []string{"now", "before", "shipped"} {
				if doc, err := tx.RunDocument(runs[i]); err != nil || string(doc) != string(profileDoc(want, 1)) {
					t.Errorf("the document of the run of %s: %s, %v", want, doc, err)
				}
			}
			if tx.getRaw(bucketUsedProfiles, profileKey("acme", "before", 1)) != nil {
				t.Errorf("a version its record says used was marked again")
			}
			if _, err := tx.ReplaceProfileDocument("acme", "before", 1, 0, profileDoc("before", 1)); proto.CodeOf(err) != proto.InvalidState {
				t.Errorf("replacing a version its record says used: %v, want INVALID_STATE", err)
			}
			return nil
		})
		if err := s.Check(); err != nil {
			t.Fatalf("a store of runs referring to their versions: %v", err)
		}
		mustUpdate(t, s, func(tx *Tx) error {
			if err := tx.del(bucketUsedProfiles, profileKey("acme", "now", 1)); err != nil {
				return err
			}
			return tx.del(bucketProfiles, profileKey("acme", "before", 1))
		})
		s.View(func(tx *Tx) error {
			if _, err := tx.RunDocument(runs[1]); proto.CodeOf(err) != proto.Internal {
				t.Errorf("the document of a run whose version is gone: %v, want INTERNAL", err)
			}
			return nil
		})
		err = s.Check()
		for _, id := range []string{runs[0].ID, runs[1].ID} {
			if err == nil || !strings.Contains(err.Error(), id) {
				t.Errorf("Check does not report %s, whose version is not a used one: %v", id, err)
			}
		}
	})
}
