package agents

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPushQueue(t *testing.T) {
	var q pushQueue
	q.init()
	for _, n := range []string{"a", "b", "a", "c", "b"} {
		q.add(n)
	}
	first := q.take(2)
	rest := q.take(10)
	var got []string
	for _, n := range append(first, rest...) {
		if n.slot != nil {
			t.Errorf("queued node %s came with a place", n.node)
		}
		got = append(got, n.node)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"a", "b", "c"}, got); diff != "" {
		t.Errorf("taken once each (-want +got):\n%s", diff)
	}
	if len(first) != 2 {
		t.Errorf("first take: %v, want 2 nodes", first)
	}
	done := make(chan []queued)
	go func() { done <- q.take(10) }()
	q.close()
	if got := <-done; got != nil {
		t.Errorf("take after close: %v", got)
	}
}

// TestPushQueueHanded: the deferred nodes handed a place are taken before the queued
// ones, with their place; those no worker took are returned by close, for their places
// to be given back, and the closed queue refuses any handed later.
func TestPushQueueHanded(t *testing.T) {
	var q pushQueue
	q.init()
	e, f := queued{"e", &slot{seq: 1}}, queued{"f", &slot{seq: 2}}
	q.add("d")
	if !q.hand(e) || !q.hand(f) {
		t.Fatal("the open queue refused a handed node")
	}
	if got := q.take(1); !slices.Equal(got, []queued{e}) {
		t.Errorf("take(1) of two handed nodes and a queued one: %v, want the first handed", got)
	}
	if got := q.close(); !slices.Equal(got, []queued{f}) {
		t.Errorf("close returned %v, want the handed node not taken", got)
	}
	if q.hand(queued{"g", &slot{}}) {
		t.Error("the closed queue took a handed node")
	}
}
