package registry

import (
	"testing"

	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// TestMain stops the etcd cluster the tests on each store backend share.
func TestMain(m *testing.M) { etcdtest.Main(m) }
