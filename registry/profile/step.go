package profile

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/labelexpr"
	"github.com/better-compute/better-compute/proto"
)

// The phases of a profile, in the order they run, with the field that holds each.
const (
	phaseMain       = "main"
	phaseAcceptance = "acceptance"
	phaseCleanup    = "cleanup"
)

// phaseSpec is a phase's name and the document field that holds its steps.
type phaseSpec struct{ name, field string }

var phases = []phaseSpec{
	{phaseMain, "steps"},
	{phaseAcceptance, "acceptance"},
	{phaseCleanup, "cleanup"},
}

func phaseRank(name string) int {
	return slices.IndexFunc(phases, func(p phaseSpec) bool { return p.name == name })
}

// walkedStep is a step as the walk found it: its place in the document and the run, its
// catalog entry (nil when use does not resolve), and what was built of it.
type walkedStep struct {
	phase    string
	index    int
	v        *jsondoc.Value
	path     jsondoc.Path
	spec     *stepSpec
	step     Step
	fallback *walkedStep
}

// runsAfter reports whether s runs after the step at (phase, index).
func (s *walkedStep) runsAfter(phase string, index int) bool {
	if r, own := phaseRank(phase), phaseRank(s.phase); r != own {
		return r < own
	}
	return index < s.index
}

// phase walks the steps of one phase into *dst.
func (w *walker) phase(name string, max int, dst *[]Step) jsondoc.Check {
	return func(v *jsondoc.Value, p jsondoc.Path) {
		items, ok := w.r.Array(v, p, max)
		if !ok {
			return
		}
		steps := make([]Step, 0, len(items))
		for i, item := range items {
			s := w.step(item, p.Index(i), name, i, false)
			w.walked = append(w.walked, s)
			steps = append(steps, s.step)
		}
		*dst = steps
	}
}

// step walks one step, or the fallback of one.
func (w *walker) step(v *jsondoc.Value, p jsondoc.Path, phase string, index int, isFallback bool) *walkedStep {
	s := &walkedStep{phase: phase, index: index, v: v, path: p}
	if use := v.Get("use"); use != nil && use.Kind == jsondoc.String {
		s.spec, _ = lookupStep(use.Text)
	}
	fields := map[string]jsondoc.Check{
		"use": func(v *jsondoc.Value, p jsondoc.Path) {
			name, ok := w.r.String(v, p)
			if !ok {
				return
			}
			if s.spec == nil {
				w.r.Add(v, p, "unknown step %q; the steps are %s", name, strings.Join(stepNames(), ", "))
			}
			s.step.Use = name
		},
		"on": func(v *jsondoc.Value, p jsondoc.Path) {
			place, ok := w.r.Enum(v, p, places...)
			if ok && s.spec != nil && !slices.Contains(s.spec.runs, place) {
				w.r.Add(v, p, "%s runs on %s, not on %s", s.spec.name, strings.Join(s.spec.runs, " or "), place)
			}
			s.step.On = place
		},
		"with": func(v *jsondoc.Value, p jsondoc.Path) { w.with(s, v, p) },
		"timeout": func(v *jsondoc.Value, p jsondoc.Path) {
			text, ok := w.r.String(v, p)
			if !ok {
				return
			}
			d, err := ParseDuration(text)
			if err != nil {
				w.r.Add(v, p, "%v", err)
			}
			s.step.Timeout = d
		},
		"retries": func(v *jsondoc.Value, p jsondoc.Path) {
			n, _ := w.r.Whole(v, p, 0, maxRetries)
			s.step.Retries = int(n)
		},
		"await": func(v *jsondoc.Value, p jsondoc.Path) {
			await, ok := w.r.Enum(v, p, awaitRejoin)
			if ok && s.spec != nil && (s.spec.awaits == nil || !s.spec.awaits(s.v.Get("with"))) {
				w.r.Add(v, p, "%s cannot await rejoin: only boot.kexec, and power.setPower with action on, reset, graceful-restart or cycle, restart the machine", s.spec.name)
			}
			s.step.Await = await
		},
		"onFailure": func(v *jsondoc.Value, p jsondoc.Path) {
			s.step.OnFailure, _ = w.r.Enum(v, p, onFailureFail, onFailureContinue)
		},
		"fallback": func(v *jsondoc.Value, p jsondoc.Path) {
			if isFallback {
				w.r.Add(v, p, "a fallback has no fallback of its own")
				return
			}
			s.fallback = w.step(v, p, phase, index, true)
			s.step.Fallback = &s.fallback.step
		},
		"when": func(v *jsondoc.Value, p jsondoc.Path) {
			text, ok := w.r.String(v, p)
			if !ok {
				return
			}
			e, err := labelexpr.Parse(text)
			if err != nil {
				w.r.Add(v, p, "%v", err)
			}
			s.step.When = e
		},
	}
	if !w.r.Fields(v, p, fields, "use") || s.spec == nil {
		return s
	}
	if s.spec.name == stepRevokeIdentity && !w.mayRevoke(s, isFallback) {
		w.r.Add(v.Get("use"), p.Field("use"), "metal.revokeIdentity revokes the node's identity for good, leaving the node only retirable: only the registry's retire profiles run it, as their last step; retire a node with `nodes retire ID`")
	}
	with := v.Get("with")
	if with == nil {
		w.missingInputs(s)
	}
	if s.spec.name == stepDeploy && !w.hasImage && with.Get(inputImage) == nil {
		at := v
		if with != nil && with.Kind == jsondoc.Object {
			at = with
		}
		w.r.AddMissing(at, p.Field("with").Field(inputImage), "deploy.deploy needs an image: set the profile's image or with.image")
	}
	return s
}

// mayRevoke reports whether s, a metal.revokeIdentity, is where the step may be: the last
// main step, not a fallback, of a shipped profile (the retire profiles). Anywhere else,
// a tenant's deploy would revoke its own node's identity and leave it only retirable.
func (w *walker) mayRevoke(s *walkedStep, isFallback bool) bool {
	return isShippedID(w.docID) && s.phase == phaseMain && !isFallback && s.index == w.phaseLen[phaseMain]-1
}

// maxRetries bounds a step's retries.
const maxRetries = 10

// missingInputs reports the inputs a step without with needs.
func (w *walker) missingInputs(s *walkedStep) {
	wp := s.path.Field("with")
	for _, in := range s.spec.inputs {
		if in.required {
			w.r.AddMissing(s.v, wp.Field(in.name), "%s needs with.%s", s.spec.name, in.name)
		}
	}
	if len(s.spec.exactlyOne) > 0 {
		w.r.AddMissing(s.v, wp, "%s needs with: set exactly one of %s", s.spec.name, strings.Join(s.spec.exactlyOne, ", "))
	}
}

// with walks a step's input against its catalog entry.
func (w *walker) with(s *walkedStep, v *jsondoc.Value, p jsondoc.Path) {
	if !w.r.Object(v, p) {
		return
	}
	s.step.With = compact(v.Raw)
	if s.spec == nil {
		return
	}
	if len(s.spec.inputs) == 0 {
		for _, m := range v.Members {
			w.r.AddAt(m.KeyOffset, p.Field(m.Key), "%s takes no input", s.spec.name)
		}
		return
	}
	fields := map[string]jsondoc.Check{}
	var required []string
	for _, in := range s.spec.inputs {
		fields[in.name] = func(v *jsondoc.Value, p jsondoc.Path) {
			w.current = s
			in.check(w, v, p)
		}
		if in.required {
			required = append(required, in.name)
		}
	}
	w.r.Fields(v, p, fields, required...)
	if len(s.spec.exactlyOne) == 0 {
		return
	}
	var set []string
	for _, m := range v.Members {
		if !slices.Contains(s.spec.exactlyOne, m.Key) {
			continue
		}
		if len(set) > 0 {
			w.r.Add(m.Value, p.Field(m.Key), "%s is set already; set exactly one of %s", set[0], strings.Join(s.spec.exactlyOne, ", "))
		}
		set = append(set, m.Key)
	}
	if len(set) == 0 {
		w.r.AddMissing(v, p, "set exactly one of %s", strings.Join(s.spec.exactlyOne, ", "))
	}
}

// stepRef is how media.insert's fromStep names an earlier step: its place in the
// document.
var stepRef = regexp.MustCompile(`^(steps|acceptance|cleanup)\[(0|[1-9][0-9]{0,2})\]$`)

// fromStep checks that a reference names a step that runs before the current one.
func (w *walker) fromStep(v *jsondoc.Value, p jsondoc.Path) {
	ref, ok := w.r.String(v, p)
	if !ok {
		return
	}
	m := stepRef.FindStringSubmatch(ref)
	if m == nil {
		w.r.Add(v, p, "%q does not name a step: write steps[N], acceptance[N] or cleanup[N], the place of an earlier step in this profile", ref)
		return
	}
	refPhase := phases[slices.IndexFunc(phases, func(p phaseSpec) bool { return p.field == m[1] })].name
	index, _ := strconv.Atoi(m[2])
	switch {
	case index >= w.phaseLen[refPhase]:
		w.r.Add(v, p, "%s: there is no such step", ref)
	case !w.current.runsAfter(refPhase, index):
		w.r.Add(v, p, "%s does not run before this step; fromStep names an earlier step", ref)
	}
}

// crossStepRules checks what involves several steps or other fields: user data rendered
// before the deploy that needs it, and an iso the deploy cannot write.
func (w *walker) crossStepRules() {
	run := slices.Clone(w.walked)
	slices.SortStableFunc(run, func(a, b *walkedStep) int {
		if a.runsAfter(b.phase, b.index) {
			return 1
		}
		if b.runsAfter(a.phase, a.index) {
			return -1
		}
		return 0
	})
	rendered := false
	deploysProfileImage := false
	for _, s := range run {
		for _, c := range []*walkedStep{s, s.fallback} {
			if c == nil || c.spec == nil {
				continue
			}
			switch c.spec.name {
			case stepDeploy:
				if w.hasUserData && !rendered {
					w.r.Add(c.v, c.path, "deploy.deploy runs before any userdata.render, so the machine would boot without its user data; render it first")
				}
				if c.v.Get("with").Get(inputImage) == nil {
					deploysProfileImage = true
				}
			case stepRender:
				if !w.hasUserData {
					w.r.Add(c.v.Get("use"), c.path.Field("use"), "userdata.render renders the profile's userData, and this profile has none")
				}
			}
		}
		// Only a render that surely ran counts: a main step, not a fallback, without when,
		// that fails the workflow when it fails.
		if s.spec != nil && s.spec.name == stepRender && s.step.When.IsZero() && s.step.OnFailure != onFailureContinue {
			rendered = true
		}
	}
	if format := w.root.Get("image").Get("format"); deploysProfileImage && format != nil && proto.ImageFormat(format.Text) == proto.FormatISO {
		w.r.Add(format, "image.format", "deploy.deploy cannot write an iso to disk; boot an iso with media.insert, or name a raw or qcow2 image")
	}
}
