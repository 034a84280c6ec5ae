package bcdconf

import (
	"testing"

	"github.com/better-compute/better-compute/testkit/docstable"
)

// TestConfigDocumented: docs/join.md's table of config.toml names every key of Config and
// no other.
func TestConfigDocumented(t *testing.T) {
	docstable.Config{Doc: "../../docs/join.md", Heading: "### The config dir", Column: "key", Tag: "toml"}.Check(t, Config{})
}
