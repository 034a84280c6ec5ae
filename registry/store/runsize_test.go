package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// TestTheLargestRunFitsTheProbe: on an etcd cluster that takes no more than the probe's
// figure (etcdProbeBytes), a run of the most steps a profile has (384), every step
// tried the most a profile allows (1 + 10 retries, then its fallback's 1 + 10), each
// attempt failing with an agent's error of 1 MiB of text, of paths, reasons and
// failures as long, its progress at proto.MaxProgressDetail, and a profile of 1 MiB
// referred to, is stored, takes results of proto.MaxStepResult until its record would
// pass MaxRunRecord, where the next result is refused with INVALID_INPUT at that result
// (reason too-large) and nothing is written, and ends. Before, such a run's record grew
// with every attempt and error (16 MiB here) until the cluster refused it.
func TestTheLargestRunFitsTheProbe(t *testing.T) {
	s := openOnAProbeSizedCluster(t, Options{})
	var err error
	tenant, id := "t"+strings.Repeat("0", 62), "p"+strings.Repeat("0", 127)
	doc := `{"pad":"` + strings.Repeat("a", proto.MaxProfileDocument-len(`{"pad":""}`)) + `"}`
	run := Run{Kind: "deploy", Node: "n" + strings.Repeat("0", 127), Tenant: tenant, Profile: ProfileRef{Tenant: tenant, ID: id, Version: 1},
		BootID: strings.Repeat("b", 36)}
	for i := range 384 {
		run.Steps = append(run.Steps, RunStep{Phase: "acceptance", Index: i, Use: "management.setBootDevice", On: "control-plane"})
	}
	err = s.Update(func(tx *Tx) error {
		_, err := tx.CreateProfile(ProfileRecord{Tenant: tenant, ID: id, Version: 1, Document: json.RawMessage(doc)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(func(tx *Tx) error {
		if err := tx.MarkProfileUsed(tenant, id, 1); err != nil {
			return err
		}
		run, err = tx.CreateRun(run)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	huge := func(n int) string { return strings.Repeat("é", n/2) }
	var failed []proto.Failure
	for range 100 {
		failed = append(failed, proto.Failure{Name: huge(1 << 10), GPUs: make([]int, 1000)})
	}
	agentError := &proto.Error{Code: proto.DriverError, Message: huge(1 << 20), Details: proto.Details{Path: huge(1 << 10), Reason: huge(1 << 10), Failed: failed}}
	progress := json.RawMessage(`{"pad":"` + strings.Repeat("p", proto.MaxProgressDetail-len(`{"pad":""}`)) + `"}`)
	now := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	// Every step but the last four fails after all its tries: the steps' attempts are
	// written in a few transactions (each 1 MiB of errors), as the engine writes them
	// one at a time.
	for from := 0; from < 380; from += 64 {
		err := s.Update(func(tx *Tx) error {
			_, err := tx.UpdateRun(run.ID, func(r *Run) error {
				for i := from; i < min(from+64, 380); i++ {
					st := &r.Steps[i]
					st.State, st.StartedAt, st.FinishedAt, st.Progress, st.Error = StepFailed, now, now, progress, agentError
					for _, fallback := range []bool{false, true} {
						for n := 1; n <= 11; n++ {
							letter := "a"
							if fallback {
								letter = "f"
							}
							st.Attempts = append(st.Attempts, Attempt{Fallback: fallback, N: n, CommandID: fmt.Sprintf("%s:%s.%d:%s%d", r.ID, st.Phase, st.Index, letter, n),
								BootID: r.BootID, StartedAt: now, FinishedAt: now, Error: agentError})
						}
					}
				}
				return nil
			})
			return err
		})
		if err != nil {
			t.Fatalf("the failed steps from %d: %v", from, err)
		}
	}
	// The last four steps take results of the most an agent may answer, until the
	// record is full.
	result := json.RawMessage(`{"pad":"` + strings.Repeat("r", proto.MaxStepResult-len(`{"pad":""}`)) + `"}`)
	took, refused := 0, error(nil)
	for i := 380; i < 384 && refused == nil; i++ {
		refused = s.Update(func(tx *Tx) error {
			_, err := tx.UpdateRun(run.ID, func(r *Run) error {
				r.Steps[i].State, r.Steps[i].Result = StepSucceeded, result
				return nil
			})
			return err
		})
		if refused == nil {
			took++
		}
	}
	var stored Run
	s.View(func(tx *Tx) error {
		if size := len(tx.kv.get(bucketRuns, []byte(run.ID))); size > MaxRunRecord {
			t.Errorf("the run's record takes %d bytes, more than MaxRunRecord (%d)", size, MaxRunRecord)
		}
		stored, err = tx.Run(run.ID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if took == 0 {
		t.Fatalf("the largest run took no result of proto.MaxStepResult: %v", refused)
	}
	t.Logf("the largest run took %d results of %d bytes", took, proto.MaxStepResult)
	e, ok := refused.(*proto.Error)
	at := fmt.Sprintf("acceptance[%d]", 380+took)
	if !ok || e.Code != proto.InvalidInput || e.Details.Path != at+".result" || e.Details.Reason != proto.ReasonTooLarge || !RunTooLarge(refused) {
		t.Fatalf("a result past the run's bound: %v, want INVALID_INPUT at %s.result, reason too-large", refused, at)
	}
	if st := stored.Steps[380+took]; st.State != StepPending || st.Result != nil {
		t.Errorf("the refused result was written: the step %s, its result of %d bytes", st.State, len(st.Result))
	}
	first := stored.Steps[0]
	if len(first.Attempts) != 2 || first.AttemptsDropped != 20 || first.Attempts[0].N != 1 || first.Attempts[0].Fallback ||
		first.Attempts[1].N != 11 || !first.Attempts[1].Fallback {
		t.Errorf("an ended step of a full run keeps %d attempts (%d dropped): %+v; want its first and its last, 20 dropped", len(first.Attempts), first.AttemptsDropped, first.Attempts)
	}
	if first.Progress != nil || !strings.HasSuffix(first.Error.Message, "bytes cut)") || first.Error.Code != proto.DriverError {
		t.Errorf("an ended step of a full run: progress %d bytes, error %s %q", len(first.Progress), first.Error.Code, first.Error.Message[max(0, len(first.Error.Message)-40):])
	}
	err = s.Update(func(tx *Tx) error {
		_, err := tx.UpdateRun(run.ID, func(r *Run) error {
			r.State = RunSucceeded
			for i := range r.Steps {
				if !r.Steps[i].Terminal() {
					r.Steps[i].State, r.Steps[i].Reason = StepSkipped, "not run"
				}
			}
			return nil
		})
		return err
	})
	if err != nil {
		t.Fatalf("ending the largest run: %v", err)
	}
}

// TestARunKeepsItsFirstAndLatestAttempts: a step keeps its first attempt and its latest
// KeptAttempts-1, counting the ones between, and cuts what an error says, on a run far
// from its bound; both backends.
func TestARunKeepsItsFirstAndLatestAttempts(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, _ := openOnFakeClock(t, open)
		run := Run{Kind: "deploy", Node: "n1", Tenant: "acme", Profile: ProfileRef{Tenant: "builtin", ID: "p", Version: 1}, Document: json.RawMessage(`{}`),
			Steps: []RunStep{{Phase: "main", Use: "power.setPower", On: "site"}}}
		if err := s.Update(func(tx *Tx) (err error) { run, err = tx.CreateRun(run); return err }); err != nil {
			t.Fatal(err)
		}
		long := &proto.Error{Code: proto.DriverError, Message: strings.Repeat("x", 5000)}
		for n := 1; n <= 6; n++ {
			err := s.Update(func(tx *Tx) (err error) {
				run, err = tx.UpdateRun(run.ID, func(r *Run) error {
					r.Steps[0].State = StepRunning
					r.Steps[0].Attempts = append(r.Steps[0].Attempts, Attempt{N: n, CommandID: fmt.Sprintf("c%d", n), Error: long})
					return nil
				})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		var got []int
		for _, a := range run.Steps[0].Attempts {
			got = append(got, a.N)
			if len(a.Error.Message) > proto.MaxErrorMessage || !strings.HasSuffix(a.Error.Message, "… (4002 bytes cut)") {
				t.Errorf("attempt %d's error keeps %d bytes: ...%q", a.N, len(a.Error.Message), a.Error.Message[len(a.Error.Message)-30:])
			}
		}
		if fmt.Sprint(got) != "[1 5 6]" || run.Steps[0].AttemptsDropped != 3 {
			t.Errorf("the step keeps attempts %v, %d dropped; want [1 5 6], 3 dropped", got, run.Steps[0].AttemptsDropped)
		}
	})
}

// TestTheEndOfARunAtItsBoundFits: on an etcd cluster of the defaults (1.5 MiB a
// request), a deploy's run whose end gives its node a host section of 1 MiB
// (Run.EndBytes) takes results up to its bound, less the room of its end, to the byte
// (one more is refused with INVALID_INPUT at the result, nothing written); its end, the
// run failed with an error of control characters (JSON's longest text), written in one
// transaction with the node's record of that section and 64 labels, its NodeSpec and an
// event, is kept by the cluster. Before, the run kept up to MaxRunRecord whatever its
// end wrote, and such an end passed the cluster's limit by 300 KiB.
func TestTheEndOfARunAtItsBoundFits(t *testing.T) {
	cfg := EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}
	// A fixed clock: every time the record writes takes as many bytes.
	now := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	s := withPool(t, func(_ testing.TB, opts Options) (*Store, error) {
		opts.Now = func() time.Time { return now }
		return OpenEtcd(cfg, opts)
	})
	labels := map[string]string{}
	for i := range 64 {
		labels[fmt.Sprintf("label-%02d", i)] = strings.Repeat("v", 100)
	}
	var n Node
	mustUpdate(t, s, func(tx *Tx) (err error) {
		n, err = tx.CreateNode(Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}, Labels: labels})
		return err
	})
	const pad = `{"kernel.pad":""}`
	host := []HostUnit{{Unit: "sysctl", Settings: json.RawMessage(`{"kernel.pad":"` + strings.Repeat("<&>", (proto.MaxProfileDocument-len(pad))/3) + `"}`)}}
	section, err := proto.Marshal(host)
	if err != nil {
		t.Fatal(err)
	}
	run := Run{Kind: "deploy", Node: n.ID, Tenant: "acme", Profile: ProfileRef{Tenant: "builtin", ID: "p", Version: 1}, Document: json.RawMessage(`{}`), EndBytes: len(section)}
	for i := range 8 {
		run.Steps = append(run.Steps, RunStep{Phase: "main", Index: i, Use: "management.setBootDevice", On: "site"})
	}
	mustUpdate(t, s, func(tx *Tx) (err error) { run, err = tx.CreateRun(run); return err })

	// put answers step i with a result of size bytes; keep false aborts the transaction
	// once the store took it.
	errAborted := errors.New("aborted")
	put := func(i, size int, keep bool) error {
		err := s.Update(func(tx *Tx) error {
			_, err := tx.UpdateRun(run.ID, func(r *Run) error {
				r.Steps[i].State, r.Steps[i].Result = StepSucceeded, json.RawMessage(`"`+strings.Repeat("r", size-2)+`"`)
				return nil
			})
			if err == nil && !keep {
				err = errAborted
			}
			return err
		})
		if errors.Is(err, errAborted) {
			return nil
		}
		return err
	}
	full := -1
	for i := range run.Steps {
		if put(i, proto.MaxStepResult, false) == nil {
			if err := put(i, proto.MaxStepResult, true); err != nil {
				t.Fatal(err)
			}
			continue
		}
		lo, hi := 2, proto.MaxStepResult // put(i, lo) is taken, put(i, hi) refused
		if err := put(i, lo, false); err != nil {
			t.Fatalf("the run at %d takes no result: %v", i, err)
		}
		for hi-lo > 1 {
			if mid := (lo + hi) / 2; put(i, mid, false) == nil {
				lo = mid
			} else {
				hi = mid
			}
		}
		if refused := put(i, hi, true); !RunTooLarge(refused) || proto.AsError(refused).Details.Path != fmt.Sprintf("steps[%d].result", i) {
			t.Fatalf("a result one byte past the run's bound: %v, want INVALID_INPUT at steps[%d].result, reason too-large", refused, i)
		}
		if err := put(i, lo, true); err != nil {
			t.Fatal(err)
		}
		full = i
		break
	}
	if full < 0 {
		t.Fatal("the run never reached its bound")
	}
	var size int
	s.View(func(tx *Tx) error { size = len(tx.kv.get(bucketRuns, []byte(run.ID))); return nil })
	if bound := min(MaxRunRecord, etcdProbeBytes-endRoom-len(section)) - endGrowth - 2*haltRoom; size != bound {
		t.Fatalf("the run's record takes %d bytes at its bound, want %d", size, bound)
	}
	t.Logf("the run keeps %d bytes, %d results, beside a host section of %d bytes", size, full+1, len(section))

	err = s.Update(func(tx *Tx) error {
		ended, err := tx.UpdateRun(run.ID, func(r *Run) error {
			for i := range r.Steps {
				if !r.Steps[i].Terminal() {
					r.Steps[i].State = StepSkipped
				}
			}
			r.State = RunFailed
			r.Failure = &StepFailure{RunID: r.ID, Step: "steps[7]", Use: "management.setBootDevice",
				Error: &proto.Error{Code: proto.DriverError, Message: strings.Repeat("\x01", 1<<20), Details: proto.Details{Path: strings.Repeat("\x01", 1<<10), Reason: strings.Repeat("\x01", 1<<10)}}}
			return nil
		})
		if err != nil {
			return err
		}
		node, err := tx.UpdateNode(n.ID, func(n *Node) error { n.State, n.Host = NodeActive, host; return nil })
		if err != nil {
			return err
		}
		if _, err := tx.SetNodeSpec(proto.NodeSpec{Node: n.ID, Role: proto.RoleNode, Labels: labels, Host: asUnits(node.Host)}); err != nil {
			return err
		}
		_, err = tx.AppendEvent(Event{Node: n.ID, Tenant: "acme", Kind: EventWorkflowEnded, Workflow: ended.ID, Detail: ended.State})
		return err
	})
	if err != nil {
		t.Fatalf("the end of a run at its bound: %v", err)
	}
}

// TestASkippedStepsReasonIsStoredOnce: the steps a run skips for one reason, one after
// another, take nothing each in its record but their state, and read back each with the
// reason; a step skipped for another reason keeps its own; both backends.
func TestASkippedStepsReasonIsStoredOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, _ := openOnFakeClock(t, open)
		run := Run{Kind: "deploy", Node: "n1", Tenant: "acme", Profile: ProfileRef{Tenant: "builtin", ID: "p", Version: 1}, Document: json.RawMessage(`{}`)}
		for i := range 300 {
			run.Steps = append(run.Steps, RunStep{Phase: "main", Index: i, Use: "power.setPower", On: "site"})
		}
		mustUpdate(t, s, func(tx *Tx) (err error) { run, err = tx.CreateRun(run); return err })
		size := func() (n int) {
			s.View(func(tx *Tx) error { n = len(tx.kv.get(bucketRuns, []byte(run.ID))); return nil })
			return n
		}
		pending := size()
		const reason, other = "not run: the workflow was cancelled", "when nvswitch does not hold for the node's labels"
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.UpdateRun(run.ID, func(r *Run) error {
				r.Steps[0].State, r.Steps[0].Reason = StepSkipped, other
				for i := 1; i < 300; i++ {
					r.Steps[i].Abandon(nil, reason, time.Time{})
				}
				return nil
			})
			return err
		})
		if grew := size() - pending; grew > 2*len(`,"reason":""`)+len(reason)+len(other)+8 {
			t.Errorf("skipping 300 steps grew the record by %d bytes: want their two reasons, once each", grew)
		}
		var stored Run
		mustUpdate(t, s, func(tx *Tx) (err error) { stored, err = tx.Run(run.ID); return err })
		for i, st := range stored.Steps {
			want := reason
			if i == 0 {
				want = other
			}
			if st.State != StepSkipped || st.Reason != want {
				t.Fatalf("%s reads %s %q, want skipped %q", st.Path(), st.State, st.Reason, want)
			}
		}
	})
}

// TestTheStopOfARunFitsHaltRoom measures, as JSON writes it at its longest (errors of
// control characters, the longest code), what stopping a run of the most steps a
// profile has adds to its record near its bound (compacted): its halt (its cancelled
// failure, the step it was on failed, its open attempt, the others skipped), and its
// end at once once halted (the cleanup step it was on failed, the others skipped). Each
// must be within haltRoom, which maxRecord keeps for each.
func TestTheStopOfARunFitsHaltRoom(t *testing.T) {
	worst := &proto.Error{Code: proto.Unauthenticated, Message: strings.Repeat("\x01", 1<<20),
		Details: proto.Details{Path: strings.Repeat("\x01", 1<<10), Reason: strings.Repeat("\x01", 1<<10)}}
	now := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	run := Run{ID: "wf_" + strings.Repeat("0", 16), Kind: "deploy", Node: "n1", Tenant: "acme", State: RunRunning}
	for i := range 384 {
		phase := "main"
		if i >= 320 {
			phase = "cleanup"
		}
		run.Steps = append(run.Steps, RunStep{Phase: phase, Index: i, Use: "management.setBootDevice", On: "control-plane", State: StepPending})
	}
	size := func(r Run) int {
		r.Steps = slices.Clone(r.Steps)
		r.bound()
		r.compact()
		rec, err := encodeRecord(r.stored())
		if err != nil {
			t.Fatal(err)
		}
		return len(rec)
	}
	// stop fails the step at i, running with an open attempt, and skips the ones after
	// it up to end.
	stop := func(r *Run, i, end int, reason string) {
		r.Steps = slices.Clone(r.Steps)
		for j := i; j < end; j++ {
			r.Steps[j].Abandon(worst, reason, now)
		}
	}
	running := func(r *Run, i int) {
		r.Steps = slices.Clone(r.Steps)
		r.Steps[i].State, r.Steps[i].StartedAt = StepRunning, now
		r.Steps[i].Attempts = []Attempt{{N: 1, CommandID: fmt.Sprintf("%s:%s.%d:a1", r.ID, r.Steps[i].Phase, i), StartedAt: now}}
	}
	running(&run, 0)
	halted := run
	halted.Cancelled = &StepFailure{RunID: run.ID, Step: "acceptance[63]", Use: "management.setBootDevice", Error: worst}
	stop(&halted, 0, 320, "not run: the workflow was cancelled")
	if grew := size(halted) - size(run); grew > haltRoom {
		t.Errorf("a run's halt adds %d bytes, more than haltRoom (%d)", grew, haltRoom)
	} else {
		t.Logf("a run's halt adds %d bytes at most", grew)
	}
	running(&halted, 320)
	atOnce := halted
	stop(&atOnce, 320, 384, "not run: the registry could not go on with the workflow")
	if grew := size(atOnce) - size(halted); grew > haltRoom {
		t.Errorf("a halted run's end at once adds %d bytes, more than haltRoom (%d)", grew, haltRoom)
	} else {
		t.Logf("a halted run's end at once adds %d bytes at most", grew)
	}
}
