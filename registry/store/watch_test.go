package store

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// TestOnWrite checks the commit hook a derived view (the site cache plans) hangs on: it
// hears of every committed write of the buckets it watches, once per transaction, and
// of nothing else: reads, writes of other buckets, rolled back writes.
func TestOnWrite(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		var calls atomic.Int64
		cancel := s.OnWrite(func() { calls.Add(1) }, BucketSites, BucketPools)
		expect := func(what string, want int64) {
			t.Helper()
			if got := calls.Load(); got != want {
				t.Fatalf("%s: %d calls, want %d", what, got, want)
			}
		}
		err := s.Update(func(tx *Tx) error {
			if _, err := tx.CreateTenant("acme"); err != nil {
				return err
			}
			if _, err := tx.CreateSite("rack-a"); err != nil {
				return err
			}
			_, err := tx.CreatePool(Pool{Tenant: "acme", Name: "gpu", Site: "rack-a"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		expect("a site and a pool written in one transaction", 1)
		s.View(func(tx *Tx) error {
			_, err := tx.Site("rack-a")
			_, _ = tx.PoolsAtSite("rack-a")
			return err
		})
		s.Update(func(tx *Tx) error {
			_, err := tx.Site("rack-a")
			return err
		})
		expect("reads", 1)
		s.Update(func(tx *Tx) error {
			_, err := tx.SetNodeSpec(proto.NodeSpec{Node: "rack-a", Role: proto.RoleSite})
			return err
		})
		expect("a write of another bucket", 1)
		s.Update(func(tx *Tx) error {
			tx.SetSiteImageSources("rack-a", []string{"https://images.example"})
			return proto.Errorf(proto.Internal, "roll back")
		})
		expect("a rolled back write", 1)
		s.Batch(func(tx *Tx) error {
			_, err := tx.SetPoolPolicy("acme", "gpu", PoolPolicy{PrewarmImages: []string{"ubuntu@24.04"}})
			return err
		})
		expect("a batched pool write", 2)
		cancel()
		s.Update(func(tx *Tx) error {
			_, err := tx.SetSiteImageSources("rack-a", nil)
			return err
		})
		expect("after cancel", 2)
	})
}

// TestLostRemoteCommits checks what the hooks learn when a watch lost events (it fell
// behind etcd's compaction): every OnWrite hook runs, and every stored NodeSpec and
// relayed command is told again.
func TestLostRemoteCommits(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		mustUpdate(t, s, func(tx *Tx) error {
			if _, err := tx.SetNodeSpec(proto.NodeSpec{Node: "nd_1", Role: proto.RoleNode}); err != nil {
				return err
			}
			_, err := tx.EnqueueAgentCommand("nd_1", proto.Command{ID: "c1", Kind: "disk.wipe"})
			return err
		})
		var got []string
		defer s.OnWrite(func() { got = append(got, "write") }, BucketImages)()
		defer s.OnNodeSpec(func(node string, gen int64) { got = append(got, fmt.Sprintf("spec %s %d", node, gen)) })()
		defer s.OnAgentCommand(func(c AgentCommand) { got = append(got, "command "+c.Node+"/"+c.ID) })()
		s.remoteCommit(remoteCommit{lost: true})
		if diff := cmp.Diff([]string{"write", "spec nd_1 1", "command nd_1/c1"}, got); diff != "" {
			t.Fatalf("hook calls (-want +got):\n%s", diff)
		}
	})
}
