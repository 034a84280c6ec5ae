package workflow

import (
	"context"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/google/go-cmp/cmp"
)

func TestJoinLog(t *testing.T) {
	fake := clock.NewFake(epoch)
	st := storetest.Open(t, store.Options{Now: fake.Now})
	log := NewJoinLog(st)
	join := func(role string) {
		fake.Advance(time.Minute)
		if err := log.Joined("nd_1", role); err != nil {
			t.Fatal(err)
		}
	}
	// waited reports whether WaitJoined returns within a moment.
	waited := func(role string, since time.Time) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		return log.WaitJoined(ctx, "nd_1", role, since) == nil
	}
	connected := func() []bool {
		var out []bool
		for _, role := range []string{"ramdisk", "node"} {
			c, err := log.Connected(context.Background(), "nd_1", role)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
		return out
	}

	if diff := cmp.Diff([]bool{false, false}, connected()); diff != "" {
		t.Errorf("before any join (-want +got):\n%s", diff)
	}
	join("ramdisk")
	ramdiskAt := fake.Now()
	if !waited("ramdisk", ramdiskAt) || !waited("", ramdiskAt) || waited("node", epoch) || waited("ramdisk", ramdiskAt.Add(time.Second)) {
		t.Error("a ramdisk join: satisfies ramdisk and any role since it, not node nor a later since")
	}
	if diff := cmp.Diff([]bool{true, false}, connected()); diff != "" {
		t.Errorf("after the ramdisk joined (-want +got):\n%s", diff)
	}
	join("node")
	if diff := cmp.Diff([]bool{false, true}, connected()); diff != "" {
		t.Errorf("after the installed OS joined (-want +got):\n%s", diff)
	}

	// A waiter is woken by a join that comes later.
	since := fake.Now().Add(time.Second)
	done := make(chan error, 1)
	go func() { done <- log.WaitJoined(context.Background(), "nd_1", "node", since) }()
	select {
	case err := <-done:
		t.Fatalf("returned before the join: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	join("node")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
