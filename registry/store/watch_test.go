package store

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
// behind etcd's compaction): every OnWrite hook runs, and every stored node, agent
// session, NodeSpec and relayed command is told again, each kind before the next.
func TestLostRemoteCommits(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := withPool(t, open)
		n := addNode(t, s)
		mustUpdate(t, s, func(tx *Tx) error {
			if _, err := tx.RecordAgentJoin(n.ID, "node", Holder{Replica: "rg_a", Started: time.Now()}, time.Time{}, ""); err != nil {
				return err
			}
			if _, err := tx.SetNodeSpec(proto.NodeSpec{Node: n.ID, Role: proto.RoleNode}); err != nil {
				return err
			}
			_, err := tx.EnqueueAgentCommand(n.ID, proto.RoleRamdisk, proto.Command{ID: "c1", Kind: "disk.wipe"}, nil)
			return err
		})
		var got []string
		defer s.OnWrite(func() { got = append(got, "write") }, BucketImages)()
		defer s.OnNodeIdentity(func(n NodeChange) { got = append(got, "node "+n.ID) })()
		defer s.OnSessionOpened(func(node, role string, h Holder) { got = append(got, "session "+node+"/"+role+" at "+h.Replica) })()
		defer s.OnNodeSpec(func(node string, gen int64) { got = append(got, fmt.Sprintf("spec %s %d", node, gen)) })()
		defer s.OnAgentCommand(func(c AgentCommand) { got = append(got, "command "+c.Node+"/"+c.ID) })()
		s.remoteCommit(remoteCommit{lost: true})
		want := []string{"write", "node " + n.ID, "session " + n.ID + "/node at rg_a", "spec " + n.ID + " 1", "command " + n.ID + "/c1"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("hook calls (-want +got):\n%s", diff)
		}
	})
}

// TestHooksCancelledWhileTold: a hook that stops watching when it is told (as one that
// waits for a single change does) while the store tells the hooks of a commit leaves
// the others told, each once. Cancelling used to shift the very list being told: the
// next hook was skipped and a nil one called, a panic.
func TestHooksCancelledWhileTold(t *testing.T) {
	s := openTest(t, testBackends[0].place(t))
	var writes, specs [3]atomic.Int64
	var cancelWrite, cancelSpec func()
	for i := range 3 {
		cancel := s.OnWrite(func() {
			if writes[i].Add(1); i == 0 {
				cancelWrite()
			}
		}, BucketSites)
		stop := s.OnNodeSpec(func(string, int64) {
			if specs[i].Add(1); i == 0 {
				cancelSpec()
			}
		})
		if i == 0 {
			cancelWrite, cancelSpec = cancel, stop
		}
	}
	value, _ := json.Marshal(proto.NodeSpec{Node: "nd_1", Role: proto.RoleNode, Generation: 1})
	s.remoteCommit(remoteCommit{buckets: []string{bucketSites, bucketNodeSpecs},
		puts: []remotePut{{bucket: bucketNodeSpecs, key: []byte("nd_1"), value: append([]byte{schemaVersion}, value...)}}})
	for i := range 3 {
		if w, n := writes[i].Load(), specs[i].Load(); w != 1 || n != 1 {
			t.Errorf("hook %d: told of %d writes and %d NodeSpecs, want 1 and 1", i, w, n)
		}
	}
}

// TestHooksComeAndGoWhileCommitting registers and cancels hooks on many goroutines
// while others commit writes the hooks watch (an API call that waits for a change does
// so, while workflows and agents write): every hook registered before a commit and
// cancelled after it is told of it. Run under the race detector (make test-race), it
// also checks that no commit reads the list of hooks while a cancel changes it.
func TestHooksComeAndGoWhileCommitting(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.CreateSite("rack-a"); return err })
		var commits, watchers sync.WaitGroup
		stop := make(chan struct{})
		for range 2 {
			commits.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					mustUpdate(t, s, func(tx *Tx) error {
						_, err := tx.SetSiteImageSources("rack-a", []string{fmt.Sprintf("images-%d.example", i)})
						return err
					})
				}
			})
		}
		for range 4 {
			watchers.Go(func() {
				for range 50 {
					told := make(chan struct{}, 1)
					cancel := s.OnWrite(func() {
						select {
						case told <- struct{}{}:
						default:
						}
					}, BucketSites)
					<-told // a commit after the hook came tells it
					cancel()
				}
			})
		}
		watchers.Wait()
		close(stop)
		commits.Wait()
	})
}
