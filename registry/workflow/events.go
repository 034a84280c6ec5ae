package workflow

import (
	"encoding/json"
	"time"

	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// Observer is told of every step and run that ends, and of the deploy stream's progress,
// after the transaction recording it committed: the registry's metrics. Its labels are bounded: a step's kind, a run's kind,
// and its profile's id only for a shipped profile (CustomProfile for a tenant's own).
type Observer interface {
	StepEnded(use, outcome string, took time.Duration)
	WorkflowEnded(kind, profile, outcome string, took time.Duration)
	// DeployStreamed is what a deploy.image progress report adds: bytes of the image
	// read from location (cache or source) and written to the disk.
	DeployStreamed(location string, read, written int64)
}

// CustomProfile is the profile label of runs of a tenant's own profile.
const CustomProfile = "custom"

// updateRun changes a run in tx and appends to its node's event log what the change
// did: steps started and ended, attestations, the run's end.
func updateRun(tx *store.Tx, id string, change func(*store.Run) error) (old, run store.Run, err error) {
	if old, err = tx.Run(id); err != nil {
		return old, old, err
	}
	if run, err = tx.UpdateRun(id, change); err != nil {
		return old, run, err
	}
	for _, e := range runEvents(old, run) {
		if _, err := tx.AppendEvent(e); err != nil {
			return old, run, err
		}
	}
	return old, run, nil
}

// runEvents are the events of a run's change from old to run.
func runEvents(old, run store.Run) []store.Event {
	var out []store.Event
	event := func(kind string) store.Event {
		return store.Event{Node: run.Node, Tenant: run.Tenant, Kind: kind, Workflow: run.ID}
	}
	for i, s := range run.Steps {
		was := old.Steps[i]
		if was.State == store.StepPending && s.State != store.StepPending && !s.StartedAt.IsZero() {
			e := event(store.EventStepStarted)
			e.Step, e.Use = s.Path(), s.Use
			out = append(out, e)
		}
		if was.Terminal() || !s.Terminal() {
			continue
		}
		e := event(store.EventStepEnded)
		e.Step, e.Use, e.To, e.Error, e.Detail = s.Path(), s.Use, s.State, s.Error, s.Reason
		if !s.StartedAt.IsZero() {
			e.Duration = s.FinishedAt.Sub(s.StartedAt)
		}
		out = append(out, e)
		if a, ok := attestation(s); ok {
			a.Node, a.Tenant, a.Workflow = run.Node, run.Tenant, run.ID
			out = append(out, a)
		}
	}
	if old.State == store.RunRunning && run.State != store.RunRunning {
		e := event(store.EventWorkflowEnded)
		e.To, e.Duration = run.State, run.FinishedAt.Sub(run.CreatedAt)
		if run.Failure != nil {
			e.Step, e.Use, e.Error = run.Failure.Step, run.Failure.Use, run.Failure.Error
		}
		out = append(out, e)
	}
	return out
}

// attestation is the attestation event of a step whose result the registry judged
// (registry/attest: a verdict "attested" and its reason), ok false for any other step.
func attestation(s store.RunStep) (store.Event, bool) {
	var verdict struct {
		Attested *bool  `json:"attested"`
		Reason   string `json:"reason"`
	}
	if s.State != store.StepSucceeded || json.Unmarshal(s.Result, &verdict) != nil || verdict.Attested == nil {
		return store.Event{}, false
	}
	e := store.Event{Kind: store.EventAttestation, Step: s.Path(), Use: s.Use, To: "attested"}
	if !*verdict.Attested {
		e.To, e.Detail = "not attested", verdict.Reason
	}
	return e, true
}

// observe tells the observer of the steps and the run the change from old to run ended.
func (e *Engine) observe(old, run store.Run) {
	if e.cfg.Observer == nil {
		return
	}
	for i, s := range run.Steps {
		if old.Steps[i].Terminal() || !s.Terminal() {
			continue
		}
		var took time.Duration
		if !s.StartedAt.IsZero() {
			took = s.FinishedAt.Sub(s.StartedAt)
		}
		e.cfg.Observer.StepEnded(s.Use, s.State, took)
	}
	if old.State == store.RunRunning && run.State != store.RunRunning {
		label := CustomProfile
		if run.Profile.Tenant == profile.ShippedTenant {
			label = run.Profile.ID
		}
		e.cfg.Observer.WorkflowEnded(run.Kind, label, run.State, run.FinishedAt.Sub(run.CreatedAt))
	}
}
