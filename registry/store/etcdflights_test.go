package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// TestEtcdCommitWithoutItsAnswerTellsTheHooks commits a NodeSpec through a replica
// whose link to its member loses the answer: the member applies the write, the caller is
// told UNAVAILABLE and no hook runs on it. Once the link is back the replica's watch
// sees the commit, and its OnNodeSpec hook (the push to the agent whose session is
// here) is told of it: before, the watch took the commit for one of this replica's own,
// whose hooks had run, and nothing told the hook, so the agent was pushed nothing until
// it reconnected (the caller, reading back, finds the NodeSpec written and writes it no
// more). A commit whose answer came is told once, on its caller.
func TestEtcdCommitWithoutItsAnswerTellsTheHooks(t *testing.T) {
	proxy := etcdtest.Shared(t).Proxy(t, 0)
	s, err := OpenEtcd(EtcdConfig{Endpoints: []string{proxy.Endpoint}, Prefix: etcdtest.Prefix(t), Timeout: 2 * time.Second}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	specs := make(chan int64, 10)
	defer s.OnNodeSpec(func(_ string, gen int64) { specs <- gen })()
	setSpec := func(rd Reader, gen int) error {
		return rd.Update(func(tx *Tx) error {
			_, err := tx.SetNodeSpec(proto.NodeSpec{Node: "site-a", Role: proto.RoleSite, Labels: map[string]string{"gen": fmt.Sprint(gen)}})
			return err
		})
	}

	rd, err := s.Reader()
	if err != nil {
		t.Fatal(err)
	}
	proxy.LoseAnswers()
	if err := setSpec(rd, 1); proto.CodeOf(err) != proto.Unavailable {
		t.Fatalf("a commit whose answer was lost: got %v, want UNAVAILABLE", err)
	}
	proxy.Heal()
	var spec proto.NodeSpec
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := s.View(func(tx *Tx) (err error) { spec, err = tx.NodeSpec("site-a"); return err })
		if err == nil || time.Now().After(deadline) {
			if err != nil || spec.Generation != 1 {
				t.Fatalf("read back, the NodeSpec whose answer was lost is %+v, %v: want it written (the member applied it)", spec, err)
			}
			break
		}
	}
	select {
	case gen := <-specs:
		if gen != 1 {
			t.Fatalf("the hook was told of generation %d, want 1", gen)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the NodeSpec committed without its answer never reached this replica's OnNodeSpec hook")
	}

	rd, err = s.Reader()
	if err != nil {
		t.Fatal(err)
	}
	if err := setSpec(rd, 2); err != nil {
		t.Fatal(err)
	}
	if gen := <-specs; gen != 2 {
		t.Fatalf("the hook was told of generation %d, want 2", gen)
	}
	select {
	case gen := <-specs:
		t.Fatalf("the hook was told again of generation %d, a commit whose answer came", gen)
	case <-time.After(2 * time.Second):
	}
}
