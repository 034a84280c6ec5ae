package registry

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/workflow"
)

// TestAnEarlierRunStillUpLeavesTheLeaseToTheNext: a run of a replica still up after the
// replica's next run started (its supervisor restarted it without ending it, or its host
// was paused past the restart and resumed), each with a connection of its own to one
// etcd store, keeps renewing its lease. Its renewal must not take the lease back: the
// agent session the next run holds would count as ended at every other replica (an agent
// "gone" to remediation and to a workflow waiting for its return) at each renewal, and
// the sessions of the earlier run as open again. The earlier run is told instead.
func TestAnEarlierRunStillUpLeavesTheLeaseToTheNext(t *testing.T) {
	cfg := store.EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}
	open := func() *store.Store {
		st, err := store.OpenEtcd(cfg, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	stale, next, other := open(), open(), open()
	earlier := store.Holder{Replica: "rg_a", Started: time.Now().Round(0)}
	if err := takeLease(stale, earlier); err != nil {
		t.Fatal(err)
	}
	later := store.Holder{Replica: "rg_a", Started: earlier.Started.Add(time.Second)}
	if err := takeLease(next, later); err != nil {
		t.Fatal(err)
	}
	if err := workflow.NewJoinLog(next, later).Joined("nd_1", "node", "boot-2"); err != nil {
		t.Fatal(err)
	}

	// The earlier run's keepLease renews at once, as it does every 10 s.
	var logged bytes.Buffer
	stop := keepLease(context.Background(), clock.NewFake(earlier.Started), stale, earlier, slog.New(slog.NewTextHandler(&logged, nil)))
	stop()

	elsewhere := workflow.NewJoinLog(other, store.Holder{Replica: "rg_b", Started: earlier.Started})
	p, err := elsewhere.Presence(t.Context(), "nd_1", "node")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Live {
		t.Errorf("after the earlier run renewed its lease, the session the next run holds is not live at another replica: %+v", p)
	}
	if !strings.Contains(logged.String(), "a later run of the replica took it over") {
		t.Errorf("the earlier run was not told that a later run holds its replica's lease; it logged:\n%s", logged.String())
	}
}
