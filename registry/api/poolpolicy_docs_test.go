package api

import (
	"testing"

	"github.com/better-compute/better-compute/testkit/docstable"
)

// TestPoolPolicyDocumented: docs/nodes.md's table of a pool's policy names every field
// pools.create and pools.update read from it and no other.
func TestPoolPolicyDocumented(t *testing.T) {
	docstable.Config{Doc: "../../docs/nodes.md", Heading: "## Pools", Column: "field", Tag: "json"}.Check(t, PoolPolicy{})
}
