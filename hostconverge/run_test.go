package hostconverge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/google/go-cmp/cmp"
)

// pass is one report Run made.
type pass struct {
	generation int64
	results    []brief
	applied    bool
}

// recorder is a Reporter that hands each pass to the test.
type recorder struct {
	passes chan pass
}

func (r *recorder) Report(generation int64, results []UnitResult) {
	r.passes <- pass{generation: generation, results: briefs(results), applied: Applied(results)}
}

func TestRun(t *testing.T) {
	h := newFakeHost(t, kernelHost(), nil)
	clk := clock.NewFake(time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC))
	c := &Converger{Root: h.root, Runner: h, Period: 10 * time.Minute, Clock: clk}
	rec := &recorder{passes: make(chan pass, 1)}
	specs := make(chan Spec, 2)
	ctx, cancel := context.WithCancel(context.Background())

	next := func(step string, want pass) {
		t.Helper()
		select {
		case got := <-rec.passes:
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(pass{})); diff != "" {
				t.Fatalf("%s: pass (-want +got):\n%s", step, diff)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no pass", step)
		}
		clk.BlockUntil(1)
		if n := clk.Waiters(); n != 1 {
			t.Fatalf("%s: Run waits on %d timers, want the period's alone", step, n)
		}
	}
	// tick lets exactly the period pass. That Run waits no longer than the period is the
	// pass the next call of next sees; Waiters cannot say it, as Run may have made its
	// pass and waited again before the check.
	tick := func() {
		t.Helper()
		clk.Advance(10*time.Minute - time.Nanosecond)
		if clk.Waiters() != 1 {
			t.Fatal("Run waits less than the period")
		}
		clk.Advance(time.Nanosecond)
	}
	sysctl := Unit{Name: "sysctl", Settings: []byte(`{"vm.swappiness": 10}`)}
	gpu := Unit{Name: "gpu-settings", Settings: []byte(`{"powerLimitWatts": 700}`)}

	// Two generations waiting: only the newer is converged.
	specs <- Spec{Generation: 1, Units: []Unit{{Name: "sysctl", Settings: []byte(`{"vm.swappiness": 30}`)}}}
	specs <- Spec{Generation: 2, Units: []Unit{sysctl}}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, specs, rec) }()
	next("first spec", pass{2, []brief{{"sysctl", Changed, "", false}}, true})

	h.write("/proc/sys/vm/swappiness", "60\n")
	tick()
	next("drift", pass{2, []brief{{"sysctl", Changed, "", false}}, true})

	tick()
	next("converged", pass{2, []brief{{"sysctl", Converged, "", false}}, true})

	specs <- Spec{Generation: 3, Units: []Unit{sysctl, gpu}}
	next("failing unit", pass{3, []brief{{"sysctl", Converged, "", false}, {"gpu-settings", Failed, "DRIVER_ERROR", false}}, false})

	h.answer(settingsQuery, reply{out: "0, 700.00, 100.00, 700.00, Enabled, Enabled\n"})
	tick()
	next("recovered", pass{3, []brief{{"sysctl", Converged, "", false}, {"gpu-settings", Converged, "", false}}, true})

	close(specs)
	tick()
	next("specs closed", pass{3, []brief{{"sysctl", Converged, "", false}, {"gpu-settings", Converged, "", false}}, true})

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
}
