package cache

import (
	"testing"

	"github.com/better-compute/better-compute/testkit/docstable"
)

// TestConfigDocumented: docs/cache.md's config table names every field of Config and no
// other, and the defaults it gives are withDefaults'.
func TestConfigDocumented(t *testing.T) {
	docstable.Config{Doc: "../docs/cache.md", Heading: "## Config", Column: "field", Derived: []string{"Clock", "Logger"}}.Check(t, Config{}.withDefaults())
}
