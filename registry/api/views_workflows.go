package api

import (
	"encoding/json"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/registry/store"
)

// RunStep is one step of a workflow run and its state, as the API shows it.
type RunStep struct {
	Phase string `json:"phase"`
	Index int    `json:"index"`
	Use   string `json:"use"`
	On    string `json:"on"`
	// Spec is the rendered step as it was when the run started.
	Spec  json.RawMessage `json:"spec"`
	State string          `json:"state"`
	// Reason says why a step was skipped.
	Reason   string    `json:"reason,omitempty"`
	Attempts []Attempt `json:"attempts,omitempty"`
	// AttemptsDropped counts the attempts between the first and the latest ones kept,
	// which the run no longer keeps (docs/workflows.md#what-a-run-keeps).
	AttemptsDropped int `json:"attemptsDropped,omitempty"`
	// ViaFallback is set when the step succeeded through its fallback.
	ViaFallback bool            `json:"viaFallback,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       *proto.Error    `json:"error,omitempty"`
	// Progress is the latest progress detail the step's agent reported.
	Progress   json.RawMessage `json:"progress,omitempty"`
	StartedAt  time.Time       `json:"startedAt,omitzero"`
	FinishedAt time.Time       `json:"finishedAt,omitzero"`
}

// Path names the step as profiles do: steps[N], acceptance[N] or cleanup[N].
func (s RunStep) Path() string { return store.RunStep{Phase: s.Phase, Index: s.Index}.Path() }

// Timeout is the step's timeout as a profile writes it (2m, 15m), as the rendered step it
// ran as (Spec) gives it; "" when it gives none.
func (s RunStep) Timeout() string {
	var spec RenderedStep
	if json.Unmarshal(s.Spec, &spec) != nil {
		return ""
	}
	return spec.Timeout
}

// Attestation is the node-signed result the step's result carries, nil when it carries
// none (registry/attest reads it).
func (s RunStep) Attestation() *proto.SignedResult { return attest.Of(s.Result) }

// Attempt is one try of a step or of its fallback.
type Attempt struct {
	Fallback bool `json:"fallback,omitempty"`
	// N counts the tries of the step, or of its fallback, from 1.
	N int `json:"n"`
	// CommandID is the id the attempt's relayed commands derive theirs from.
	CommandID string `json:"commandId"`
	// Awaiting is set while the attempt waits for the machine's agent to rejoin.
	Awaiting   bool         `json:"awaiting,omitempty"`
	StartedAt  time.Time    `json:"startedAt"`
	FinishedAt time.Time    `json:"finishedAt,omitzero"`
	Error      *proto.Error `json:"error,omitempty"`
}

func stepOf(s store.RunStep) RunStep {
	v := RunStep{Phase: s.Phase, Index: s.Index, Use: s.Use, On: s.On, Spec: s.Spec, State: s.State, Reason: s.Reason,
		AttemptsDropped: s.AttemptsDropped, ViaFallback: s.ViaFallback, Result: s.Result, Error: s.Error, Progress: s.Progress, StartedAt: s.StartedAt, FinishedAt: s.FinishedAt}
	for _, a := range s.Attempts {
		v.Attempts = append(v.Attempts, Attempt{Fallback: a.Fallback, N: a.N, CommandID: a.CommandID, Awaiting: a.Awaiting,
			StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Error: a.Error})
	}
	return v
}
