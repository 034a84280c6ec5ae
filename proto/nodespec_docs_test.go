package proto

import (
	"testing"

	"github.com/better-compute/better-compute/testkit/docstable"
)

// TestNodeSpecDocumented: docs/agent-plane.md's table of the NodeSpec names every field
// of NodeSpec and no other.
func TestNodeSpecDocumented(t *testing.T) {
	docstable.Config{Doc: "../docs/agent-plane.md", Heading: "## NodeSpec", Column: "field", Tag: "json"}.Check(t, NodeSpec{})
}
