package store

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// TestEtcdBatchCoalesces checks Batch and Update (group commit) on etcd: two replicas'
// concurrent calls, each
// adding one to a shared counter and writing a key of its own, every fifth failing after
// its writes. A failing call returns its own error and none of its writes is kept; every
// other call returns nil, and its writes committed exactly once (the counter is the
// number of calls that succeeded: a call committed twice or lost would show), though the
// two replicas' batches conflict on the counter; and the calls went in fewer
// transactions than there were calls.
func TestEtcdBatchCoalesces(t *testing.T) {
	for name, write := range map[string]func(*Store, func(*Tx) error) error{"Batch": (*Store).Batch, "Update": (*Store).Update} {
		t.Run(name, func(t *testing.T) { coalesces(t, write) })
	}
}

func coalesces(t *testing.T, write func(*Store, func(*Tx) error) error) {
	stores := openReplicas(t, EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}, 2)
	const calls, bucket = 200, "batchtest"
	errFail := errors.New("this call fails")
	commits := map[kvTx]bool{} // the transactions that committed
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, calls)
	for i := range calls {
		wg.Go(func() {
			errs[i] = write(stores[i%2], func(tx *Tx) error {
				n, _ := strconv.Atoi(string(tx.kv.get(bucket, []byte("count"))))
				if err := tx.kv.put(bucket, []byte("count"), []byte(strconv.Itoa(n+1))); err != nil {
					return err
				}
				if err := tx.kv.put(bucket, fmt.Appendf(nil, "call-%03d", i), []byte("x")); err != nil {
					return err
				}
				if i%5 == 0 {
					return errFail
				}
				kv := tx.kv
				kv.onCommit(func() {
					mu.Lock()
					defer mu.Unlock()
					commits[kv] = true
				})
				return nil
			})
		})
	}
	wg.Wait()
	succeeded := 0
	for i, err := range errs {
		switch {
		case i%5 == 0 && !errors.Is(err, errFail):
			t.Errorf("call %d returned %v, want its own error", i, err)
		case i%5 != 0 && err != nil:
			t.Errorf("call %d returned %v, want nil (another call of its batch failed)", i, err)
		case err == nil:
			succeeded++
		}
	}
	if err := stores[0].View(func(tx *Tx) error {
		if got := string(tx.kv.get(bucket, []byte("count"))); got != strconv.Itoa(succeeded) {
			t.Errorf("counter = %s, want %d: a call's writes committed more or less than once", got, succeeded)
		}
		for i := range calls {
			got := tx.kv.get(bucket, fmt.Appendf(nil, "call-%03d", i)) != nil
			if got != (i%5 != 0) {
				t.Errorf("call %d (failing: %v): its key stored: %v", i, i%5 == 0, got)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls in %d commits", succeeded, len(commits))
	if len(commits) >= succeeded {
		t.Errorf("%d calls went in %d commits: not coalesced", succeeded, len(commits))
	}
}

// TestEtcdCommitHookRunsOnTheCaller has a commit hook write to the store itself: the
// hook runs on the goroutine of the call that committed, as with bbolt, not on the one
// that commits the group, so its write does not wait for itself.
func TestEtcdCommitHookRunsOnTheCaller(t *testing.T) {
	s := openReplicas(t, EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}, 1)[0]
	var once sync.Once
	hookErr := make(chan error, 1)
	defer s.OnWrite(func() {
		once.Do(func() {
			hookErr <- s.Update(func(tx *Tx) error { _, err := tx.CreateTenant("from-hook"); return err })
		})
	}, BucketSites)()
	done := make(chan error, 1)
	go func() { done <- s.Update(func(tx *Tx) error { _, err := tx.CreateSite("rack-a"); return err }) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a commit hook that writes never returned: it waits for the goroutine running it")
	}
	if err := <-hookErr; err != nil {
		t.Fatalf("the hook's write: %v", err)
	}
	if err := s.View(func(tx *Tx) error { _, err := tx.Tenant("from-hook"); return err }); err != nil {
		t.Fatal(err)
	}
}

// TestEtcdGroupGathersUnderLoad has callers each make their next call as soon as the
// last returned, through one replica. Without a gather the callers a commit releases
// arrive while the group after it commits, so they split into two groups that take turns
// (about two commits a round of the callers); with it, the group after a group of several
// waits for them, and each round of the callers commits together (one commit a round, but
// the first two). The gather is long here, 100 ms, so that on any machine every caller a
// commit released is back before it ends: what is counted is commits, not time.
func TestEtcdGroupGathersUnderLoad(t *testing.T) {
	s := openReplicas(t, EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}, 1)[0]
	s.kv.(*etcdBackend).group.gather = 100 * time.Millisecond
	const callers, rounds = 8, 10
	before, _ := s.TxStats()
	var wg sync.WaitGroup
	for k := range callers {
		wg.Go(func() {
			for i := range rounds {
				if err := s.Update(func(tx *Tx) error {
					return tx.kv.put("gathertest", fmt.Appendf(nil, "%d-%d", k, i), []byte("x"))
				}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	after, _ := s.TxStats()
	commits, most := after.Commits-before.Commits, int64(rounds+3)
	t.Logf("%d calls of %d callers in %d commits", callers*rounds, callers, commits)
	if commits > most {
		t.Errorf("%d calls of %d callers in a loop went in %d commits, want at most %d: the group after a group of several did not wait for the callers it released", callers*rounds, callers, commits, most)
	}
}
