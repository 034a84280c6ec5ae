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
	got := slices.Sorted(slices.Values(append(first, rest...)))
	if diff := cmp.Diff([]string{"a", "b", "c"}, got); diff != "" {
		t.Errorf("taken once each (-want +got):\n%s", diff)
	}
	if len(first) != 2 {
		t.Errorf("first take: %v, want 2 nodes", first)
	}
	done := make(chan []string)
	go func() { done <- q.take(10) }()
	q.close()
	if got := <-done; got != nil {
		t.Errorf("take after close: %v", got)
	}
}
