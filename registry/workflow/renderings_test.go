package workflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/registry/workflow"
	"github.com/better-compute/better-compute/testkit"
)

// largeDoc is a profile of about proto.MaxProfileDocument: 330 media.insert steps of
// URLs as long as they may be, with when expressions of about 1 KiB that hold for no
// node.
func largeDoc(tb testing.TB) []byte {
	tb.Helper()
	term := "never='" + strings.Repeat("w", 240) + "'"
	when := strings.Join([]string{term, term, term, term}, ",")
	step := `{"use":"media.insert","with":{"url":"https://images.example/` + strings.Repeat("u", 2048-len("https://images.example/")) + `"},"when":"` + when + `"}`
	main := strings.TrimSuffix(strings.Repeat(step+",", 256), ",")
	acceptance := strings.TrimSuffix(strings.Repeat(step+",", 64), ",")
	cleanup := strings.TrimSuffix(strings.Repeat(step+",", 10), ",")
	p, err := profile.Define([]byte(`{"id":"large","version":1,"target":"metal","steps":[` + main + `],"acceptance":[` + acceptance + `],"cleanup":[` + cleanup + `]}`))
	if err != nil {
		tb.Fatal(err)
	}
	if n := len(p.Document()); n > proto.MaxProfileDocument || n < proto.MaxProfileDocument*9/10 {
		tb.Fatalf("the large profile takes %d bytes, want about %d", n, proto.MaxProfileDocument)
	}
	return p.Document()
}

// endedRun stores doc as acme's version and a run of it that ended, all its steps
// skipped, and returns an engine that does not drive it.
func endedRun(tb testing.TB, doc []byte) (*workflow.Engine, string) {
	tb.Helper()
	st := storetest.Filled(tb, store.Options{})
	p, err := profile.Define(doc)
	if err != nil {
		tb.Fatal(err)
	}
	ref := store.ProfileRef{Tenant: "acme", ID: p.ID(), Version: p.Version()}
	var run store.Run
	storetest.Update(tb, st, func(tx *store.Tx) error {
		if _, err := tx.CreateProfile(store.ProfileRecord{Tenant: ref.Tenant, ID: ref.ID, Version: ref.Version, Document: doc}); err != nil {
			return err
		}
		if err := tx.MarkProfileUsed(ref.Tenant, ref.ID, ref.Version); err != nil {
			return err
		}
		run = store.Run{Kind: "test", Node: "nd_1", Tenant: "acme", Profile: ref}
		for _, s := range profile.Render(p) {
			run.Steps = append(run.Steps, store.RunStep{Phase: s.Phase, Index: s.Index, Use: s.Use, On: s.On})
		}
		if run, err = tx.CreateRun(run); err != nil {
			return err
		}
		_, err = tx.UpdateRun(run.ID, func(r *store.Run) error {
			for i := range r.Steps {
				r.Steps[i].State, r.Steps[i].Reason = store.StepSkipped, "not run"
			}
			r.State = store.RunSucceeded
			return nil
		})
		return err
	})
	return workflow.New(workflow.Config{Store: st}), run.ID
}

// TestAnEndedRunReadsAsItDid: workflows.get of an ended run shows the same bytes read
// once, read again (its rendering kept) and read by an engine that renders it anew.
func TestAnEndedRunReadsAsItDid(t *testing.T) {
	e, id := endedRun(t, largeDoc(t))
	view := func(e *workflow.Engine) []byte {
		t.Helper()
		run, err := e.Watch(context.Background(), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(run.Steps[0].Spec) == 0 {
			t.Fatal("the ended run shows no spec")
		}
		out, err := json.Marshal(run)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first, again := view(e), view(e)
	if !workflow.KeepsRendering(e, store.ProfileRef{Tenant: "acme", ID: "large", Version: 1}) {
		t.Error("the ended run's rendering is not kept")
	}
	workflow.ForgetRenderings(e)
	anew := view(e)
	if !bytes.Equal(first, again) || !bytes.Equal(first, anew) {
		t.Errorf("the ended run reads %d bytes, then %d, rendered anew %d: not the same", len(first), len(again), len(anew))
	}
}

// BenchmarkReadAnEndedRun: workflows.get of an ended run of a profile of about 1 MiB
// (Engine.Watch of a run the engine does not drive), its rendering kept, beside its
// peer, the same read rendering the profile anew (as every read did before).
func BenchmarkReadAnEndedRun(b *testing.B) {
	e, id := endedRun(b, largeDoc(b))
	read := func(anew bool) float64 {
		const reads = 20
		start := time.Now()
		for range reads {
			if anew {
				workflow.ForgetRenderings(e)
			}
			if _, err := e.Watch(context.Background(), id, 0); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(start).Microseconds()) / reads
	}
	for b.Loop() {
		p := testkit.RunPairs(testkit.PairRounds(b), testkit.PeerOverOurs, func() float64 { return read(false) }, func() float64 { return read(true) })
		p.Report(b, "", "reading an ended run of a 1 MiB profile, rendering kept vs rendered anew:", "kept", "anew", "µs/read")
	}
}
