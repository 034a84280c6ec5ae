package store

import (
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// opener opens a new, empty store of one backend for t.
type opener func(t testing.TB, opts Options) (*Store, error)

// testBackends are the backends every store test runs on: the conformance suite. place
// makes a new, empty store's place (a directory, an etcd prefix) and returns the opener
// that opens it, as often as asked: a store closed and opened again.
var testBackends = []struct {
	name  string
	place func(t testing.TB) opener
}{
	{"bbolt", func(t testing.TB) opener {
		dir := t.TempDir()
		return func(_ testing.TB, opts Options) (*Store, error) { return Open(dir, opts) }
	}},
	{"etcd", func(t testing.TB) opener {
		cfg := EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}
		return func(_ testing.TB, opts Options) (*Store, error) { return OpenEtcd(cfg, opts) }
	}},
}

// openOnFakeClock opens a store with open on a fake clock, which the test moves; the
// store is closed when t ends.
func openOnFakeClock(t *testing.T, open opener) (*Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	st, err := open(t, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, clk
}

// eachBackend runs fn as a subtest per backend.
func eachBackend(t *testing.T, fn func(t *testing.T, open opener)) {
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) {
			fn(t, func(t testing.TB, opts Options) (*Store, error) { return b.place(t)(t, opts) })
		})
	}
}
