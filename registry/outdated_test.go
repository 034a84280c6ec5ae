package registry

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// TestServeOfAnOutdatedReplicaSaysTheFormat: a replica whose store another replica
// raised past the format it reads before its Serve resumed the runs (the resume's read
// is the first to meet the new format) returns the store's INVALID_CONFIG saying the
// format and what to do, as a replica serving when the format is raised does. Before,
// Serve returned the resume's UNAVAILABLE ("this replica cannot read the store any
// more ... try again"), and serve exited with it, telling the operator to try again.
func TestServeOfAnOutdatedReplicaSaysTheFormat(t *testing.T) {
	cluster := etcdtest.Shared(t)
	prefix := etcdtest.Prefix(t)
	r := newTestRegistry(t, Config{Store: StoreConfig{Backend: "etcd", EtcdEndpoints: cluster.Endpoints, EtcdPrefix: prefix},
		KEKFile: filepath.Join(t.TempDir(), "kek")})
	newer := strconv.Itoa(store.Format + 1)
	cluster.Put(t, prefix+"/store_format/format", newer)
	select {
	case <-r.st.Outdated():
	case <-time.After(30 * time.Second): // a guard against a hang, not a measure
		t.Fatal("the replica was not told that the format was raised")
	}
	err := r.Serve(context.Background())
	want := []string{"another replica changed the store's format", "the store is of format " + newer, "run the newer release"}
	if proto.CodeOf(err) != proto.InvalidConfig {
		t.Fatalf("Serve: %v, want INVALID_CONFIG saying %q", err, want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Serve: %v, want it to say %q", err, w)
		}
	}
}
