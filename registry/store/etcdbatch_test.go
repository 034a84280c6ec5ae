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
	s.kv.(*etcdBackend).group.gather.max = 100 * time.Millisecond
	const callers, rounds = 8, 10
	before, _ := s.TxStats()
	inLoops(t, callers, rounds, func(k, i int) error {
		return s.Update(func(tx *Tx) error {
			return tx.kv.put("gathertest", fmt.Appendf(nil, "%d-%d", k, i), []byte("x"))
		})
	})
	after, _ := s.TxStats()
	commits, most := after.Commits-before.Commits, int64(rounds+3)
	t.Logf("%d calls of %d callers in %d commits", callers*rounds, callers, commits)
	if commits > most {
		t.Errorf("%d calls of %d callers in a loop went in %d commits, want at most %d: the group after a group of several did not wait for the callers it released", callers*rounds, callers, commits, most)
	}
}

// TestEtcdGatherEndsWhenItsCallersWait drives one replica's groups step by step, the
// calls' functions (which run inside the group's transaction) holding a commit open
// while the next calls queue: a group of one, then a group of four while a fifth call
// waits. With a gather of an hour, the four callers the group of four released, each
// making its next call, must end the gather as soon as they and the fifth wait, and go
// in one commit with it; a gather that waited its time would hold them for the hour.
// Closing the store ends the gather that follows, with nobody coming.
func TestEtcdGatherEndsWhenItsCallersWait(t *testing.T) {
	s := openReplicas(t, EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}, 1)[0]
	b := s.kv.(*etcdBackend)
	b.group.gather.max = time.Hour
	errs := make(chan error, 16)
	write := func(name string, hold chan struct{}) error {
		return s.Update(func(tx *Tx) error {
			if hold != nil {
				<-hold
			}
			return tx.kv.put("gathertest", []byte(name), []byte("x"))
		})
	}
	call := func(name string, hold chan struct{}, again bool) {
		go func() {
			err := write(name, hold)
			if err == nil && again {
				err = write(name+"-again", nil)
			}
			errs <- err
		}()
	}
	until := func(what string, cond func(g *group) bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			b.group.mu.Lock()
			ok := cond(&b.group)
			b.group.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30 s", what)
			}
		}
	}
	wait := func(n int) {
		t.Helper()
		for range n {
			select {
			case err := <-errs:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("a call did not return within 30 s: the gather did not end when the callers the commit released were back")
			}
		}
	}
	holdA, holdB := make(chan struct{}), make(chan struct{})
	call("a", holdA, false) // a group of one, held open
	until("the first group under way", func(g *group) bool { return g.running && len(g.waiting) == 0 })
	call("b1", holdB, true)
	for _, name := range []string{"b2", "b3", "b4"} {
		call(name, nil, true)
	}
	until("four calls waiting", func(g *group) bool { return len(g.waiting) == 4 })
	close(holdA)
	wait(1)
	until("the group of four under way", func(g *group) bool { return len(g.waiting) == 0 })
	call("c", nil, false)
	until("a call waiting behind it", func(g *group) bool { return len(g.waiting) == 1 })
	before, _ := s.TxStats()
	close(holdB)
	wait(5)
	after, _ := s.TxStats()
	if n := after.Commits - before.Commits; n != 2 {
		t.Errorf("the group of four, then its four callers again with the call that waited, went in %d commits, want 2", n)
	}
	until("the gather after them under way", func(g *group) bool { return g.gather.want == 5 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	until("the run ended with the store", func(g *group) bool { return !g.running })
}

// inLoops runs call on each of workers goroutines turns times, each turn once the one
// before returned, and waits for them; a call that fails fails t and ends its loop.
func inLoops(t *testing.T, workers, turns int, call func(worker, turn int) error) {
	var wg sync.WaitGroup
	for k := range workers {
		wg.Go(func() {
			for i := range turns {
				if err := call(k, i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
