package site

import (
	"testing"

	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/cache"
	"github.com/better-compute/better-compute/testkit/docstable"
)

// TestConfigDocumented: docs/site.md's configuration table names every field of the site
// config and no other, and the defaults it gives are the code's: withDefaults', and the
// cache's for the cache fields it leaves zero (boot's fields are boot.md's, checked in
// boot; httpBase's default is worked out from boot.serverIP).
func TestConfigDocumented(t *testing.T) {
	c := Config{}.withDefaults()
	c.Cache.MaxPulls = cache.DefaultMaxPulls
	c.Cache.RetryInterval = boot.Duration(cache.DefaultRetryInterval)
	docstable.Config{Doc: "../../docs/site.md", Heading: "## Configuration", Column: "field", Tag: "json",
		Elsewhere: []string{"boot"}, Derived: []string{"httpBase"}}.Check(t, c)
}
