package site

import (
	"testing"

	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// TestMain stops the etcd cluster the tests on etcd share.
func TestMain(m *testing.M) { etcdtest.Main(m) }
