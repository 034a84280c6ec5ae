package workflow

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/google/go-cmp/cmp"
)

// TestRunsReadTheirProfile, on both backends: a run of a stored version keeps neither a
// copy of its document nor its rendered steps: it refers to the version, which it marked
// used, runs the steps rendered from it, and Watch shows them. A run stored in the
// earlier shape, its document and every rendered step in its record, runs the steps it
// froze (here an input the document does not say), and Watch shows those. A run whose
// version no longer defines (checks grown stricter) fails at once, INTERNAL, running
// nothing, and Watch shows it without its steps' specs.
func TestRunsReadTheirProfile(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			st := b.Open(t, store.Options{})
			storetest.Fill(t, st)
			node := storetest.Node(t, st, store.Node{MACs: []string{"52:54:00:00:00:01"}}).ID
			agent := newFakeAgent()
			e := New(Config{Store: st, Relay: agent, Backoff: backoff})
			e.OnFinish("test", func(*store.Tx, store.Run) error { return nil })
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(func() { cancel(); e.Wait() })
			agent.setStop(cancel)
			if err := e.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			end := func(id string) store.Run {
				t.Helper()
				wctx, stop := context.WithTimeout(ctx, 10*time.Second)
				defer stop()
				run, err := e.Watch(wctx, id, 0)
				for err == nil && run.State == store.RunRunning && wctx.Err() == nil {
					run, err = e.Watch(wctx, id, run.Rev)
				}
				if err != nil || run.State == store.RunRunning {
					t.Fatalf("workflow %s: %v\n%s", id, err, summary(run))
				}
				return run
			}
			specs := func(run store.Run) []string {
				var out []string
				for _, s := range run.Steps {
					out = append(out, string(s.Spec))
				}
				return out
			}
			rendered := func(p *profile.Profile, change func(*profile.RenderedStep)) []string {
				var out []string
				for _, s := range profile.Render(p) {
					if change != nil {
						change(&s)
					}
					spec, _ := json.Marshal(s)
					out = append(out, string(spec))
				}
				return out
			}
			define := func(id string) *profile.Profile {
				t.Helper()
				p, err := profile.Define([]byte(`{"id":"` + id + `","version":1,"target":"metal","steps":[{"use":"power.setPower","with":{"action":"cycle"}},{"use":"inventory.refresh"}]}`))
				if err != nil {
					t.Fatal(err)
				}
				storetest.Update(t, st, func(tx *store.Tx) error {
					_, err := tx.CreateProfile(store.ProfileRecord{Tenant: storetest.Tenant, ID: p.ID(), Version: 1, Document: p.Document()})
					return err
				})
				return p
			}

			p := define("now")
			var run store.Run
			storetest.Update(t, st, func(tx *store.Tx) (err error) {
				run, err = e.Create(tx, NewRun{Kind: "test", Node: node, Tenant: storetest.Tenant,
					Profile: store.ProfileRef{Tenant: storetest.Tenant, ID: "now", Version: 1}, Define: p})
				return err
			})
			st.View(func(tx *store.Tx) error {
				stored, err := tx.Run(run.ID)
				rec, _, _ := tx.Profile(storetest.Tenant, "now", 1)
				if err != nil || len(stored.Document) > 0 || !cmp.Equal(specs(stored), []string{"", ""}) || !rec.Used {
					t.Errorf("the run as stored: %v, document %s, specs %q; its version used %t", err, stored.Document, specs(stored), rec.Used)
				}
				return nil
			})
			e.Start(run.ID)
			ended := end(run.ID)
			if diff := cmp.Diff(rendered(p, nil), specs(ended)); diff != "" || ended.State != store.RunSucceeded {
				t.Errorf("the run %s; the steps Watch shows (-rendered +got):\n%s", summary(ended), diff)
			}
			if got := agent.input(run.ID + ":main.0:a1"); got != `{"action":"cycle"}` {
				t.Errorf("power.setPower ran with %s", got)
			}

			p = define("before")
			frozen := rendered(p, func(s *profile.RenderedStep) {
				if s.Use == "power.setPower" {
					s.With = json.RawMessage(`{"action":"on"}`)
				}
			})
			storetest.Update(t, st, func(tx *store.Tx) (err error) {
				if err := tx.MarkProfileUsed(storetest.Tenant, "before", 1); err != nil {
					return err
				}
				run = store.Run{Kind: "test", Node: node, Tenant: storetest.Tenant, Profile: store.ProfileRef{Tenant: storetest.Tenant, ID: "before", Version: 1}, Document: p.Document()}
				for i, s := range profile.Render(p) {
					run.Steps = append(run.Steps, store.RunStep{Phase: s.Phase, Index: s.Index, Use: s.Use, On: s.On, Spec: json.RawMessage(frozen[i])})
				}
				run, err = tx.CreateRun(run)
				return err
			})
			e.Start(run.ID)
			ended = end(run.ID)
			if diff := cmp.Diff(frozen, specs(ended)); diff != "" || ended.State != store.RunSucceeded {
				t.Errorf("the run of the earlier shape %s; the steps Watch shows (-frozen +got):\n%s", summary(ended), diff)
			}
			if got := agent.input(run.ID + ":main.0:a1"); got != `{"action":"on"}` {
				t.Errorf("power.setPower of the run of the earlier shape ran with %s, not the input it froze", got)
			}

			storetest.Update(t, st, func(tx *store.Tx) (err error) {
				if _, err := tx.CreateProfile(store.ProfileRecord{Tenant: storetest.Tenant, ID: "stricter", Version: 1, Document: json.RawMessage(`{"id":"stricter"}`)}); err != nil {
					return err
				}
				if err := tx.MarkProfileUsed(storetest.Tenant, "stricter", 1); err != nil {
					return err
				}
				run, err = tx.CreateRun(store.Run{Kind: "test", Node: node, Tenant: storetest.Tenant, Profile: store.ProfileRef{Tenant: storetest.Tenant, ID: "stricter", Version: 1},
					Steps: []store.RunStep{{Phase: "main", Use: "power.getPower", On: "site"}, {Phase: "cleanup", Use: "boot.cleanUp", On: "site"}}})
				return err
			})
			e.Start(run.ID)
			ended = end(run.ID)
			want := "failed at steps[0] INTERNAL\nsteps[0] power.getPower skipped\ncleanup[0] boot.cleanUp skipped"
			if diff := cmp.Diff(want, summary(ended)); diff != "" || !cmp.Equal(specs(ended), []string{"", ""}) || !strings.Contains(ended.Failure.Error.Message, errNoPlan.Error()) {
				t.Errorf("a run whose version no longer defines (-want +got):\n%s\nspecs %q, failure %v", diff, specs(ended), ended.Failure.Error)
			}
			if got := agent.executed(); len(got) != 4 {
				t.Errorf("the agent ran %q, want only the steps of the two runs before", got)
			}
		})
	}
}
