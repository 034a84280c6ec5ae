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

// TestMeasuredBootPolicyDocumented: docs/attestation.md's table of a pool's
// policy.measuredBoot names every field of it and no other.
func TestMeasuredBootPolicyDocumented(t *testing.T) {
	docstable.Config{Doc: "../../docs/attestation.md", Heading: "## Policy", Column: "field", Tag: "json"}.Check(t, MeasuredBootPolicy{})
}
