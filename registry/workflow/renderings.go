package workflow

import (
	"encoding/json"
	"sync"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// keptRenderings is how many renderings an engine keeps: a profile document takes up
// to 1 MiB, and its rendering a few times that, so a few dozen MiB at most.
const keptRenderings = 8

// rendering is a profile document defined and its steps rendered, as every run of it
// reads them.
type rendering struct {
	profile *profile.Profile
	// derr is why the document no longer defines (the checks grew stricter since);
	// profile and steps are nil then.
	derr  error
	steps []profile.RenderedStep
	// specs are steps' JSON, as workflows.get shows each step's spec.
	specs []json.RawMessage
}

// renderings keeps the renderings of the stored versions that runs refer to, the most
// recently read first, up to a bound: a version a run refers to is used, and a used
// version is never replaced (a deleted one only hidden), so its rendering never
// changes. A run that keeps its own document (a shipped profile's) is rendered at each
// read, as its document is in its record.
type renderings struct {
	mu    sync.Mutex
	max   int
	order []store.ProfileRef
	kept  map[store.ProfileRef]*rendering
}

func newRenderings(max int) *renderings {
	return &renderings{max: max, kept: map[store.ProfileRef]*rendering{}}
}

// of returns the rendering of run's document, read in tx unless kept.
func (rs *renderings) of(tx *store.Tx, run store.Run) (*rendering, error) {
	stored := len(run.Document) == 0
	if stored {
		if r := rs.get(run.Profile); r != nil {
			return r, nil
		}
	}
	doc, err := tx.RunDocument(run)
	if err != nil {
		return nil, err
	}
	r := render(doc)
	if stored && r.derr == nil {
		rs.put(run.Profile, r)
	}
	return r, nil
}

// render defines doc and renders its steps.
func render(doc json.RawMessage) *rendering {
	p, err := profile.Define(doc)
	if err != nil {
		return &rendering{derr: err}
	}
	r := &rendering{profile: p, steps: profile.Render(p)}
	r.specs, _ = specsOf(r.steps) // none on failure: withSpecs makes them again, and says why
	return r
}

// specsOf is steps as workflows.get shows each step's spec: its JSON.
func specsOf(steps []profile.RenderedStep) ([]json.RawMessage, error) {
	specs := make([]json.RawMessage, 0, len(steps))
	for _, s := range steps {
		spec, err := proto.Marshal(s)
		if err != nil {
			return nil, err
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

func (rs *renderings) get(ref store.ProfileRef) *rendering {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.kept[ref]
	if r != nil {
		rs.touch(ref)
	}
	return r
}

func (rs *renderings) put(ref store.ProfileRef, r *rendering) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if _, ok := rs.kept[ref]; !ok && len(rs.order) == rs.max {
		delete(rs.kept, rs.order[len(rs.order)-1])
		rs.order = rs.order[:len(rs.order)-1]
	}
	rs.kept[ref] = r
	rs.touch(ref)
}

// touch moves ref to the front of the order (adding it).
func (rs *renderings) touch(ref store.ProfileRef) {
	for i, o := range rs.order {
		if o == ref {
			rs.order = append(rs.order[:i], rs.order[i+1:]...)
			break
		}
	}
	rs.order = append([]store.ProfileRef{ref}, rs.order...)
}
