package metal

import (
	"slices"
	"testing"

	"github.com/better-compute/better-compute/testkit/docstable"
)

// hardwareDoc is where the hardware profiles file is documented.
const hardwareDoc, hardwareHeading = "../../docs/nodes.md", "### The hardware profiles file"

// TestConfigDocumented: docs/nodes.md's table of the hardware profiles file (serve
// --hardware-profiles) names every field the registry reads and no other, and the
// concerns it lists are the ones a profile may bind.
func TestConfigDocumented(t *testing.T) {
	docstable.Config{Doc: hardwareDoc, Heading: hardwareHeading, Column: "field", Tag: "json",
		Keys: map[string]string{"hardwareProfiles": "NAME", "hardwareProfiles.NAME.drivers": "CONCERN"}}.Check(t, hardwareFile{})
	_, rows := docstable.Table(t, hardwareDoc, hardwareHeading, "field")
	for _, r := range rows {
		if slices.Equal(docstable.Names(r.Cells[0]), []string{"hardwareProfiles.NAME.drivers.CONCERN"}) {
			got := docstable.Names(r.Cells[1])
			if len(got) < len(concerns) || !slices.Equal(got[:len(concerns)], concerns) {
				t.Errorf("%s:%d: the concerns are %v; the row lists %v first", hardwareDoc, r.Line, concerns, got)
			}
			return
		}
	}
	t.Errorf("%s: no row for hardwareProfiles.NAME.drivers.CONCERN", hardwareDoc)
}
