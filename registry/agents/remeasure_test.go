package agents

import (
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// TestSamplesUnder: the samples of a fast path that bring a stale estimate under the
// bound, as quic-go moves it: a handshake that waited 9 s (smoothed RTT 9 s, deviation
// 4.5 s, a probe timeout of 27 s) takes 33 samples of a millisecond to get under a
// second, the deviation lagging the smoothed RTT; one that waited 3 s takes 25. An
// estimate under the bound takes none, one of 10 minutes maxProbes/2 (65), one of an hour
// 78.
func TestSamplesUnder(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		srtt, dev, sample, bound time.Duration
		want                     int
	}{
		{9 * time.Second, 4500 * ms, ms, time.Second, 33},
		{3 * time.Second, 1500 * ms, ms, time.Second, 25},
		{9 * time.Second, 4500 * ms, 25 * ms, time.Second, 34}, // samples of the agent's delayed acks, if not corrected
		{200 * ms, 100 * ms, ms, time.Second, 0},
		{10 * time.Minute, 5 * time.Minute, ms, time.Second, maxProbes / 2},
		{time.Hour, 30 * time.Minute, ms, time.Second, 78},
	} {
		if got := samplesUnder(c.srtt, c.dev, c.sample, c.bound); got != c.want {
			t.Errorf("samplesUnder(%v, %v, %v, %v) = %d, want %d", c.srtt, c.dev, c.sample, c.bound, got, c.want)
		}
	}
}

// TestStale: an estimate is stale above max(1 s, 10 x the least sample), and only then.
func TestStale(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		st   quic.ConnectionStats
		want bool
	}{
		{quic.ConnectionStats{SmoothedRTT: 9 * time.Second, MeanDeviation: 4500 * ms, MinRTT: ms}, true},
		{quic.ConnectionStats{SmoothedRTT: 300 * ms, MeanDeviation: 150 * ms, MinRTT: ms}, false},                      // 0.9 s: a slow connect's, under the floor
		{quic.ConnectionStats{SmoothedRTT: 400 * ms, MeanDeviation: 200 * ms, MinRTT: ms}, true},                       // 1.2 s
		{quic.ConnectionStats{SmoothedRTT: 3 * time.Second, MeanDeviation: 1500 * ms, MinRTT: 3 * time.Second}, false}, // one slow sample, and no faster one: the path's
		{quic.ConnectionStats{SmoothedRTT: 600 * ms, MeanDeviation: 300 * ms, MinRTT: 200 * ms}, false},                // 1.8 s under 2 s: a slow path
		{quic.ConnectionStats{SmoothedRTT: 2 * time.Second, MeanDeviation: time.Second, MinRTT: 200 * ms}, true},
	} {
		if got := stale(c.st); got != c.want {
			t.Errorf("stale(srtt %v, dev %v, min %v) = %t, want %t", c.st.SmoothedRTT, c.st.MeanDeviation, c.st.MinRTT, got, c.want)
		}
	}
}

// TestProbeAgain: a stale estimate is probed; one that probes left stale (a path whose
// round trips swing widely) is probed again only once its probe timeout has doubled, so
// such paths do not hold the probing places at every ping.
func TestProbeAgain(t *testing.T) {
	ms := time.Millisecond
	jittery := quic.ConnectionStats{SmoothedRTT: 300 * ms, MeanDeviation: 250 * ms, MinRTT: 20 * ms} // 1.3 s, stale
	worse := quic.ConnectionStats{SmoothedRTT: 1200 * ms, MeanDeviation: 400 * ms, MinRTT: 20 * ms}  // 2.8 s
	sane := quic.ConnectionStats{SmoothedRTT: 30 * ms, MeanDeviation: 10 * ms, MinRTT: 20 * ms}
	for _, c := range []struct {
		name string
		st   quic.ConnectionStats
		left time.Duration
		want bool
	}{
		{"stale, never probed", jittery, 0, true},
		{"stale, probes left it so", jittery, 1300 * ms, false},
		{"stale, a little worse than probes left it", jittery, 700 * ms, false},
		{"stale, twice what probes left it", worse, 1300 * ms, true},
		{"sane", sane, 0, false},
		{"sane, probes had left it stale", sane, 1300 * ms, false},
	} {
		if got := probeAgain(c.st, c.left); got != c.want {
			t.Errorf("%s: probeAgain(probe timeout %v, left %v) = %t, want %t", c.name, probeTimeout(c.st), c.left, got, c.want)
		}
	}
}
