package replicas

import (
	"testing"

	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/testkit"
)

// fleet is three registry processes on one etcd cluster (testkit.StartReplicas).
type fleet struct {
	cluster *etcdtest.Cluster
	reg     []*testkit.Registry
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{cluster: etcdtest.Start(t)}
	f.reg = testkit.StartReplicas(t, f.cluster.Endpoints, 3, nil)
	return f
}
