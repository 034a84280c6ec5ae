package profile

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/better-compute/better-compute/proto"
)

// RenderedStep is one step as a workflow runs it, everything the profile left to the
// step resolved.
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

// Render expands a profile into the steps a workflow of it runs: main, acceptance, then
// cleanup.
//
// A step without on runs at the first place the catalog gives it, except a step that can
// run on the ramdisk or the node: it runs where the machine's agent is at that point of
// the run, as the steps before it leave it. metal.ensureRamdisk and wait.agentJoined with
// role ramdisk leave the ramdisk; boot.kexec and wait.agentJoined with role node leave the
// node. Before any of them, the ramdisk.
func Render(p *Profile) []RenderedStep {
	var out []RenderedStep
	agent := ""
	for _, phase := range phases {
		for i, s := range p.phaseSteps(phase.name) {
			out = append(out, p.render(s, phase.name, i, agent))
			agent = agentAfter(s, agent)
		}
	}
	return out
}

func (p *Profile) phaseSteps(phase string) []Step {
	switch phase {
	case phaseMain:
		return p.steps
	case phaseAcceptance:
		return p.acceptance
	default:
		return p.cleanup
	}
}

func (p *Profile) render(s Step, phase string, index int, agent string) RenderedStep {
	spec, _ := lookupStep(s.Use)
	r := RenderedStep{
		Phase:     phase,
		Index:     index,
		Use:       s.Use,
		On:        s.On,
		With:      p.withDefaults(spec, s.With),
		Retries:   s.Retries,
		Await:     s.Await,
		OnFailure: s.OnFailure,
		When:      s.When.String(),
	}
	if r.On == "" {
		r.On = spec.runs[0]
		if slices.Contains(spec.runs, agent) {
			r.On = agent
		}
	}
	timeout := s.Timeout
	if timeout == 0 {
		timeout = spec.timeout
	}
	r.Timeout, r.TimeoutSeconds = formatDuration(timeout), int64(timeout.Seconds())
	if r.OnFailure == "" {
		r.OnFailure = onFailureFail
	}
	if s.Fallback != nil {
		f := p.render(*s.Fallback, phase, index, agent)
		r.Fallback = &f
	}
	return r
}

// withDefaults returns a step's input with the defaults of the inputs left out, and
// deploy.deploy's image defaulting to the profile's.
func (p *Profile) withDefaults(spec *stepSpec, with json.RawMessage) json.RawMessage {
	m := map[string]any{}
	if len(with) > 0 {
		d := json.NewDecoder(bytes.NewReader(with))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			panic("decoding a checked step input: " + err.Error())
		}
	}
	for _, in := range spec.inputs {
		if _, ok := m[in.name]; !ok && in.def != nil {
			m[in.name] = in.def
		}
	}
	if _, ok := m[inputImage]; spec.name == stepDeploy && !ok && p.image != nil {
		m[inputImage] = p.image.Ref
	}
	if len(m) == 0 {
		return nil
	}
	text, err := proto.Marshal(m)
	if err != nil {
		panic("encoding a step input: " + err.Error())
	}
	return text
}

// agentAfter returns where the machine's agent is after step s, given where it was.
func agentAfter(s Step, agent string) string {
	switch s.Use {
	case stepEnsureRamdisk:
		return Ramdisk
	case stepKexec:
		return Node
	case stepAgentJoined:
		var with struct{ Role string }
		if err := json.Unmarshal(s.With, &with); err == nil && (with.Role == Ramdisk || with.Role == Node) {
			return with.Role
		}
	}
	return agent
}
