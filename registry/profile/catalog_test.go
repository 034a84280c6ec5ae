package profile

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// The catalog is proto's table of steps with a profile's checks added: the same kinds, in
// the same order, running where proto says.
func TestCatalogIsProtosSteps(t *testing.T) {
	var want, got []string
	for _, k := range proto.Steps {
		want = append(want, k.Kind)
	}
	got = stepNames()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("catalog steps (-proto +catalog):\n%s", diff)
	}
	for _, s := range catalog {
		k, _ := proto.LookupStep(s.name)
		if diff := cmp.Diff(texts(k.Runs), s.runs); diff != "" {
			t.Errorf("%s runs (-proto +catalog):\n%s", s.name, diff)
		}
	}
}
