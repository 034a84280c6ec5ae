package api

import (
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
)

// RenderedStep is one step of a rendered profile, as a workflow of it runs it.
type RenderedStep struct {
	// Phase is main, acceptance or cleanup; Index the step's place in it. A fallback
	// carries its step's.
	Phase string `json:"phase"`
	Index int    `json:"index"`
	Use   string `json:"use"`
	// On is where the step runs.
	On string `json:"on"`
	// With is the input with the defaults filled in; nil when the step takes none.
	With json.RawMessage `json:"with,omitempty"`
	// Timeout is the step's timeout written as a profile writes it, and in seconds.
	Timeout        string        `json:"timeout"`
	TimeoutSeconds int64         `json:"timeoutSeconds"`
	Retries        int           `json:"retries"`
	Await          string        `json:"await,omitempty"`
	OnFailure      string        `json:"onFailure"`
	Fallback       *RenderedStep `json:"fallback,omitempty"`
	// When is the canonical label expression, "" when the step always runs.
	When string `json:"when,omitempty"`
}

// Issue is one problem of a profile document, at its path.
type Issue struct {
	Path    string     `json:"path"`
	Code    proto.Code `json:"code"`
	Message string     `json:"message"`
}

func renderedOf(s profile.RenderedStep) RenderedStep {
	v := RenderedStep{Phase: s.Phase, Index: s.Index, Use: s.Use, On: s.On, With: s.With, Timeout: s.Timeout, TimeoutSeconds: s.TimeoutSeconds,
		Retries: s.Retries, Await: s.Await, OnFailure: s.OnFailure, When: s.When}
	if s.Fallback != nil {
		f := renderedOf(*s.Fallback)
		v.Fallback = &f
	}
	return v
}

// issueOf is an issue as the API reports it: through the API a document's problems are
// INVALID_INPUT, as profiles.create refuses them (define), at the same path.
func issueOf(i profile.Issue) Issue {
	return Issue{Path: i.Path, Code: proto.InvalidInput, Message: i.Message}
}
