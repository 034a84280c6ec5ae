package api

import (
	"testing"

	"github.com/better-compute/better-compute/testkit/docstable"
)

// TestClientConfigDocumented: the README's table of the CLI config names every field of
// ClientConfig and no other.
func TestClientConfigDocumented(t *testing.T) {
	docstable.Config{Doc: "../../README.md", Heading: "### The CLI config", Column: "field", Tag: "json"}.Check(t, ClientConfig{})
}
