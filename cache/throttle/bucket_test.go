package throttle

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
)

var start = time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)

func TestReserve(t *testing.T) {
	for name, tc := range map[string]struct {
		rate, burst int64
		takes       []int64
		advance     time.Duration // after the first take
		want        time.Duration // the last take's wait
	}{
		"within the burst":            {rate: 100, burst: 50, takes: []int64{20, 30}, want: 0},
		"past the burst goes in debt": {rate: 100, burst: 50, takes: []int64{50, 50}, want: 500 * time.Millisecond},
		"debt adds up":                {rate: 100, burst: 50, takes: []int64{50, 50, 50, 50}, want: 1500 * time.Millisecond},
		"time pays part of the debt":  {rate: 100, burst: 50, takes: []int64{50, 50, 50}, advance: 250 * time.Millisecond, want: 750 * time.Millisecond},
		"refill stops at the burst":   {rate: 100, burst: 50, takes: []int64{50, 50, 50}, advance: time.Hour, want: 500 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			c := clock.NewFake(start)
			b := New(c, tc.rate, tc.burst)
			var got time.Duration
			for i, n := range tc.takes {
				got = b.reserve(n)
				if i == 0 {
					c.Advance(tc.advance)
				}
			}
			if got != tc.want {
				t.Errorf("last wait %v, want %v", got, tc.want)
			}
		})
	}
}

// Many callers at one instant share the rate: whatever the interleaving, the longest
// wait is (all bytes - burst) / rate.
func TestSharedByConcurrentCallers(t *testing.T) {
	b := New(clock.NewFake(start), 1000, 100)
	var mu sync.Mutex
	var longest time.Duration
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				d := b.reserve(50)
				mu.Lock()
				longest = max(longest, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if want := time.Duration(float64(8*25*50-100) / 1000 * float64(time.Second)); longest != want {
		t.Errorf("longest wait %v, want %v", longest, want)
	}
}

func TestNilBucketDoesNotLimit(t *testing.T) {
	var b *Bucket
	if err := b.Wait(context.Background(), 1<<40); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Wait(ctx, 1); err == nil {
		t.Error("a done context did not end Wait")
	}
}
