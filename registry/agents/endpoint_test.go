package agents

import (
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/store"
	"github.com/quic-go/quic-go"
)

func TestReturnDelay(t *testing.T) {
	const n, rate = 10000, 900
	base := streamStart(n, store.AgentReturn{})
	slot := func(k int) time.Duration { return time.Duration(float64(k) / rate * float64(time.Second)) }
	cases := map[string]struct {
		k       int
		elapsed time.Duration
		want    time.Duration
	}{
		"first told":                 {0, 0, base},
		"next one a step later":      {1, 0, base + slot(1)},
		"time spent telling is kept": {1000, 100 * time.Millisecond, base + slot(1000) - 100*time.Millisecond},
		"last told":                  {n - 1, time.Second, base + slot(n-1) - time.Second},
		"moment passed":              {0, time.Hour, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := returnDelay(base, tc.k, tc.elapsed, rate); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if got := returnDelay(streamStart(10_000_000, store.AgentReturn{}), 9_999_999, 0, rate); got != maxReturn {
		t.Fatalf("a huge fleet: got %v, want the cap %v", got, maxReturn)
	}
	if fast, slow := returnDelay(base, n, 0, 2*rate), returnDelay(base, n, 0, rate); fast >= slow {
		t.Fatalf("the stream ends after %v at twice the rate, %v at the rate: a faster stream ends sooner", fast, slow)
	}
}

// TestStreamStart: a stream starts once telling the fleet takes at closeRate, or a
// quarter past the last measured restart where that is sooner, that restart scaled up to
// a fleet larger than the one it told.
func TestStreamStart(t *testing.T) {
	const n = 10000
	telling := time.Duration(n) * time.Second / closeRate // 1.25 s
	cases := map[string]struct {
		plan store.AgentReturn
		want time.Duration
	}{
		"no restart measured":                     {store.AgentReturn{}, telling},
		"a restart faster than telling":           {store.AgentReturn{Restart: 400 * time.Millisecond, RestartTold: n}, 500 * time.Millisecond},
		"a restart slower than telling":           {store.AgentReturn{Restart: 2 * time.Second, RestartTold: n}, telling},
		"a fleet twice the one the restart told":  {store.AgentReturn{Restart: 400 * time.Millisecond, RestartTold: n / 2}, time.Second},
		"a fleet ten times the one it told":       {store.AgentReturn{Restart: 400 * time.Millisecond, RestartTold: n / 10}, telling},
		"a fleet smaller than the one it told":    {store.AgentReturn{Restart: 400 * time.Millisecond, RestartTold: 2 * n}, 500 * time.Millisecond},
		"a restart of a stop that told no agents": {store.AgentReturn{Restart: 400 * time.Millisecond}, telling},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := streamStart(n, tc.plan); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMeasureRestart: an endpoint started after a stop that told agents measures its
// restart from the stop's time; one whose stop told none, or whose time is off the clock,
// keeps the restart measured before.
func TestMeasureRestart(t *testing.T) {
	stop := time.Date(2026, 12, 6, 22, 0, 0, 0, time.UTC)
	before := store.AgentReturn{Restart: time.Second, RestartTold: 50}
	cases := map[string]struct {
		told           int
		stoppedAt, now time.Time
		restart        time.Duration
		restartTold    int
	}{
		"after a stop of 100 agents": {100, stop, stop.Add(450 * time.Millisecond), 450 * time.Millisecond, 100},
		"a stop that told none":      {0, stop, stop.Add(450 * time.Millisecond), time.Second, 50},
		"no stop time stored":        {100, time.Time{}, stop, time.Second, 50},
		"a clock set back":           {100, stop, stop.Add(-time.Second), time.Second, 50},
		"down past any stream":       {100, stop, stop.Add(maxReturn + time.Second), time.Second, 50},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan := before
			plan.Told, plan.StoppedAt = tc.told, tc.stoppedAt
			got := measureRestart(plan, tc.now)
			if got.Restart != tc.restart || got.RestartTold != tc.restartTold {
				t.Fatalf("restart %v of %d told, want %v of %v", got.Restart, got.RestartTold, tc.restart, tc.restartTold)
			}
		})
	}
}

func TestAdapt(t *testing.T) {
	plan := store.AgentReturn{Rate: 1000, Admission: 128, Told: 10000}
	cases := map[string]struct {
		plan         store.AgentReturn
		m            returnMeasure
		rate         float64
		admission    int
		measuredRate float64
	}{
		"saturated: what the machine completed while it refused": {
			plan, returnMeasure{accepted: 10000, refusedAttempts: 2000, saturatedAccepted: 1200, saturated: 2 * time.Second, meanHandshake: 50 * time.Millisecond},
			600, 90, 600,
		},
		"refusing past 5% while completing more than the stream (the refused coming back on it): the stream stays": {
			plan, returnMeasure{accepted: 10000, refusedAttempts: 700, saturatedAccepted: 2200, saturated: 2 * time.Second, meanHandshake: 50 * time.Millisecond},
			1000, 150, 1100,
		},
		"saturated, refusing within 5% of the fleet: the stream stays": {
			plan, returnMeasure{accepted: 10000, refusedAttempts: 480, saturatedAccepted: 850, saturated: time.Second, meanHandshake: 20 * time.Millisecond},
			1000, 120, 850,
		},
		"refusing just past 5% of the fleet: what the machine completed": {
			plan, returnMeasure{accepted: 10000, refusedAttempts: 501, saturatedAccepted: 850, saturated: time.Second, meanHandshake: 20 * time.Millisecond},
			850, 102, 850,
		},
		"kept up for over a second, no first packet refused, its handshakes waiting for the processor: asks 25% more": {
			plan, returnMeasure{accepted: 10000, meanHandshake: 60 * time.Millisecond},
			1250, maxAdmission, 0,
		},
		"kept up, its handshakes under the idle handshake's time: asks twice as much": {
			plan, returnMeasure{accepted: 10000, meanHandshake: 3 * time.Millisecond},
			2000, maxAdmission, 0,
		},
		"kept up, its handshakes under the idle handshake's time, first packets refused in a moment: asks twice as much": {
			plan, returnMeasure{accepted: 10000, refusedAttempts: 5, saturatedAccepted: 82, saturated: sample, meanHandshake: 6 * time.Millisecond},
			2000, maxAdmission, 820,
		},
		"its handshakes under the idle handshake's time, but refusing over 1% of the fleet: the stream stays": {
			plan, returnMeasure{accepted: 10000, refusedAttempts: 150, saturatedAccepted: 90, saturated: sample, meanHandshake: 6 * time.Millisecond},
			1000, 106, 900,
		},
		"kept up, its handshakes at the idle handshake's time: asks twice as much": {
			plan, returnMeasure{accepted: 10000, meanHandshake: idleHandshake},
			2000, maxAdmission, 0,
		},
		"kept up, its handshakes between the idle and the busy handshake's times: in proportion": {
			plan, returnMeasure{accepted: 10000, meanHandshake: 12 * time.Millisecond},
			1850, maxAdmission, 0,
		},
		"kept up, between the two, first packets refused in moments: in proportion to what those showed": {
			plan, returnMeasure{accepted: 10000, refusedAttempts: 7, saturatedAccepted: 110, saturated: sample, meanHandshake: 15 * time.Millisecond},
			1550, 178, 1100,
		},
		"kept up, its handshakes at the busy handshake's time: asks 25% more": {
			plan, returnMeasure{accepted: 10000, meanHandshake: busyHandshake},
			1250, 150, 0,
		},
		"a slow stream, its handshakes under the idle handshake's time: the rate stays": {
			store.AgentReturn{Rate: 1000, Admission: 128, Told: 500}, returnMeasure{accepted: 500, meanHandshake: 3 * time.Millisecond},
			1000, 103, 0,
		},
		"kept up, first packets refused in moments completing more than 25% more: asks 25% more": {
			plan, returnMeasure{accepted: 10000, refusedAttempts: 50, saturatedAccepted: 140, saturated: sample, meanHandshake: 60 * time.Millisecond},
			1250, maxAdmission, 1400,
		},
		"kept up, first packets refused in moments completing 10% more: asks that": {
			plan, returnMeasure{accepted: 10000, refusedAttempts: 80, saturatedAccepted: 330, saturated: 3 * sample, meanHandshake: 20 * time.Millisecond},
			1100, 132, 1100,
		},
		"first packets refused in some samples, attempts within 1% of the fleet, completing less than told: the stream stays": {
			plan, returnMeasure{accepted: 10000, refusedAttempts: 35, saturatedAccepted: 900, saturated: time.Second, meanHandshake: 20 * time.Millisecond},
			1000, 120, 900,
		},
		"a fleet too small to tell: the rate stays": {
			store.AgentReturn{Rate: 1000, Admission: 128, Told: 300}, returnMeasure{accepted: 300},
			1000, 128, 0,
		},
		"not all back: the rate stays": {
			plan, returnMeasure{accepted: 9000},
			1000, 128, 0,
		},
		"a stall: never below the floor": {
			plan, returnMeasure{accepted: 10000, refusedAttempts: 9000, saturated: 5 * time.Second, meanHandshake: time.Second},
			minRate, 110, 0,
		},
		"a fast machine: never above the cap": {
			store.AgentReturn{Rate: maxRate, Admission: 128, Told: 100000}, returnMeasure{accepted: 100000, meanHandshake: time.Millisecond},
			maxRate, maxAdmission, 0,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := adapt(tc.plan, tc.m)
			if got.Rate != tc.rate || got.Admission != tc.admission || got.MeasuredRate != tc.measuredRate || got.Told != 0 {
				t.Fatalf("got rate %v, admission %d, measured %v, told %d; want %v, %d, %v, 0", got.Rate, got.Admission, got.MeasuredRate, got.Told, tc.rate, tc.admission, tc.measuredRate)
			}
			if got.Refused != tc.m.refusedAttempts {
				t.Fatalf("the plan records %d refused, want the %d attempts the agents counted", got.Refused, tc.m.refusedAttempts)
			}
		})
	}
}

// TestPathsOf: the probe timeouts are each session's smoothed RTT plus four times its
// variation (at least quic-go's 1 ms granularity), summarised by median, 99th percentile
// and maximum, and the packets are summed.
func TestPathsOf(t *testing.T) {
	if got := pathsOf(nil); got != (Paths{}) {
		t.Errorf("no sessions: %+v, want nothing", got)
	}
	var stats []quic.ConnectionStats
	for i := range 200 {
		stats = append(stats, quic.ConnectionStats{SmoothedRTT: time.Duration(i) * time.Millisecond, PacketsSent: 10, PacketsLost: uint64(i % 2)})
	}
	// One session whose first exchanges took 3 s: 3 s smoothed, 1.5 s of variation.
	stats[17] = quic.ConnectionStats{SmoothedRTT: 3 * time.Second, MeanDeviation: 1500 * time.Millisecond, PacketsSent: 10}
	got := pathsOf(stats)
	want := Paths{Sessions: 200, ProbeTimeoutMedian: 102 * time.Millisecond, ProbeTimeoutP99: 200 * time.Millisecond,
		ProbeTimeoutMax: 9 * time.Second, PacketsSent: 2000, PacketsLost: 99}
	if got != want {
		t.Errorf("pathsOf: %+v, want %+v", got, want)
	}
}
