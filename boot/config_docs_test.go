package boot

import (
	"testing"

	"github.com/better-compute/better-compute/testkit/docstable"
)

// TestConfigDocumented: docs/boot.md's configuration table names every field of
// boot.Config and no other, and the defaults it gives are withDefaults'.
func TestConfigDocumented(t *testing.T) {
	docstable.Config{Doc: "../docs/boot.md", Heading: "## Configuration", Column: "field", Tag: "json"}.Check(t, Config{}.withDefaults())
}
