package clock

import (
	"testing"
	"time"
)

func TestFakeFiresInOrderOfTime(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	soon, later, stopped := f.NewTimer(time.Second), f.NewTimer(time.Minute), f.NewTimer(time.Second)
	select {
	case <-f.NewTimer(0).C():
	default:
		t.Fatal("a timer of 0 did not fire at once")
	}
	after := f.After(2 * time.Second)
	f.BlockUntil(4)
	if !stopped.Stop() || stopped.Stop() {
		t.Error("Stop reports a waiting timer once")
	}
	f.Advance(2 * time.Second)
	if got := <-soon.C(); !got.Equal(start.Add(2 * time.Second)) {
		t.Errorf("soon fired at %v", got)
	}
	if got := <-after; !got.Equal(start.Add(2 * time.Second)) {
		t.Errorf("after fired at %v", got)
	}
	select {
	case <-later.C():
		t.Fatal("later fired early")
	case <-stopped.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	if f.Waiters() != 1 {
		t.Errorf("waiters %d, want 1", f.Waiters())
	}
	f.Advance(time.Minute)
	<-later.C()
	if !f.Now().Equal(start.Add(62*time.Second)) || f.Waiters() != 0 {
		t.Errorf("now %v, waiters %d", f.Now(), f.Waiters())
	}
}
