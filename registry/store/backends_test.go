package store

import (
	"os"
	"testing"

	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	etcdtest.StopShared()
	os.Exit(code)
}

// opener opens a new, empty store of one backend for t.
type opener func(t testing.TB, opts Options) (*Store, error)

// testBackends are the backends every store test runs on: the conformance suite.
var testBackends = []struct {
	name string
	open opener
}{
	{"bbolt", func(t testing.TB, opts Options) (*Store, error) { return Open(t.TempDir(), opts) }},
	{"etcd", func(t testing.TB, opts Options) (*Store, error) {
		return OpenEtcd(EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}, opts)
	}},
}

// eachBackend runs fn as a subtest per backend.
func eachBackend(t *testing.T, fn func(t *testing.T, open opener)) {
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) { fn(t, b.open) })
	}
}
