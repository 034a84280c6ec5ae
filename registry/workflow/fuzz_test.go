package workflow

import (
	"strings"
	"testing"
)

// FuzzStepOf checks that a command id an agent reports progress for either is refused or
// names a step whose attempt ids start the way it does.
func FuzzStepOf(f *testing.F) {
	for _, seed := range []string{"wf_0123456789abcdef:main.5:a1", "wf_1:cleanup.0:f2:image", "", ":::", "a:b.05:c", "a:b.-1:c", "x:.1:y"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) {
		run, phase, index, err := stepOf(id)
		if err != nil {
			return
		}
		prefix := strings.TrimSuffix(commandID(run, phase, index, false, 1), "a1")
		if run == "" || phase == "" || index < 0 || !strings.HasPrefix(id, prefix) {
			t.Fatalf("%q parsed as run %q, phase %q, index %d", id, run, phase, index)
		}
	})
}
