package ramdisk

import (
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/ramdisk/deploy"
)

// TestDeployProgressFollowsTheClock: deploy.image reports its first progress, then one
// about every progressEvery of the agent's clock, not of the system's.
func TestDeployProgressFollowsTheClock(t *testing.T) {
	var got []int64
	fake := clock.NewFake(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC))
	progress := progressReporter(fake, func(p proto.DeployImageProgress) { got = append(got, p.BytesWritten) })
	step := func(written int64, advance time.Duration) {
		fake.Advance(advance)
		progress(deploy.Progress{Location: "cache", Read: written, Total: 100, Written: written})
	}
	step(1, 0)
	step(2, progressEvery/2)
	step(3, progressEvery/2-time.Nanosecond)
	step(4, time.Nanosecond)
	step(5, 0)
	step(6, 10*progressEvery)
	if want := []int64{1, 4, 6}; !slices.Equal(got, want) {
		t.Errorf("reported the progress of bytes %v, want %v", got, want)
	}
}
