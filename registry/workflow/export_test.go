package workflow

import (
	"testing"

	"github.com/better-compute/better-compute/registry/store"
)

// ForgetRenderings drops the renderings e keeps, as a new engine starts: its next read
// of a run renders the run's profile anew.
func ForgetRenderings(e *Engine) { e.renders = newRenderings(keptRenderings) }

// KeepsRendering reports whether e keeps the rendering of version ref.
func KeepsRendering(e *Engine, ref store.ProfileRef) bool { return e.renders.get(ref) != nil }

// TestRenderingsKeepTheLatest: the renderings kept are the most recently read, up to
// their bound.
func TestRenderingsKeepTheLatest(t *testing.T) {
	rs := newRenderings(2)
	ref := func(v int) store.ProfileRef { return store.ProfileRef{Tenant: "acme", ID: "p", Version: v} }
	rs.put(ref(1), &rendering{})
	rs.put(ref(2), &rendering{})
	rs.get(ref(1))
	rs.put(ref(3), &rendering{})
	if rs.get(ref(2)) != nil || rs.get(ref(1)) == nil || rs.get(ref(3)) == nil || len(rs.kept) != 2 {
		t.Errorf("kept %v, want versions 3 and 1", rs.order)
	}
}
