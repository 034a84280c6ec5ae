package userdata

import (
	"testing"

	"github.com/better-compute/better-compute/testkit/docstable"
)

// TestConfigDocumented: docs/userdata.md's configuration table names every field of the
// configuration file (`serve --userdata-config`) and no other.
func TestConfigDocumented(t *testing.T) {
	docstable.Config{Doc: "../../docs/userdata.md", Heading: "## Configuration", Column: "field", Tag: "json"}.Check(t, fileConfig{})
}
