package hostconverge

import (
	"context"
	"errors"
	"sync"
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
	mu      sync.Mutex
	applied []int64
	passes  chan pass
}

func (r *recorder) Report(generation int64, results []UnitResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passes <- pass{generation: generation, results: briefs(results)}
}

func (r *recorder) Applied(generation int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = append(r.applied, generation)
}

func TestRun(t *testing.T) {
	h := newFakeHost(t, kernelHost(), nil)
	clk := clock.NewFake(time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC))
	c := &Converger{Root: h.root, Runner: h, Period: 10 * time.Minute, Clock: clk}
	rec := &recorder{passes: make(chan pass, 1)}
	specs := make(chan Spec, 2)
	ctx, cancel := context.WithCancel(context.Background())

	next := func(step string, want pass, wantApplied []int64) {
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
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if diff := cmp.Diff(wantApplied, rec.applied); diff != "" {
			t.Fatalf("%s: applied (-want +got):\n%s", step, diff)
		}
	}
	// tick lets exactly the period pass.
	tick := func() {
		t.Helper()
		clk.Advance(10*time.Minute - time.Nanosecond)
		if clk.Waiters() != 1 {
			t.Fatal("Run waits less than the period")
		}
		clk.Advance(time.Nanosecond)
		if clk.Waiters() != 0 {
			t.Fatal("Run waits more than the period")
		}
	}
	sysctl := Unit{Name: "sysctl", Settings: []byte(`{"vm.swappiness": 10}`)}
	gpu := Unit{Name: "gpu-settings", Settings: []byte(`{"powerLimitWatts": 700}`)}

	// Two generations waiting: only the newer is converged.
	specs <- Spec{Generation: 1, Units: []Unit{{Name: "sysctl", Settings: []byte(`{"vm.swappiness": 30}`)}}}
	specs <- Spec{Generation: 2, Units: []Unit{sysctl}}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, specs, rec) }()
	next("first spec", pass{2, []brief{{"sysctl", Changed, "", false}}, false}, []int64{2})

	h.write("/proc/sys/vm/swappiness", "60\n")
	tick()
	next("drift", pass{2, []brief{{"sysctl", Changed, "", false}}, false}, []int64{2})

	tick()
	next("converged", pass{2, []brief{{"sysctl", Converged, "", false}}, false}, []int64{2})

	specs <- Spec{Generation: 3, Units: []Unit{sysctl, gpu}}
	next("failing unit", pass{3, []brief{{"sysctl", Converged, "", false}, {"gpu-settings", Failed, "DRIVER_ERROR", false}}, false}, []int64{2})

	h.answer(settingsQuery, reply{out: "0, 700.00, 100.00, 700.00, Enabled, Enabled\n"})
	tick()
	next("recovered", pass{3, []brief{{"sysctl", Converged, "", false}, {"gpu-settings", Converged, "", false}}, false}, []int64{2, 3})

	close(specs)
	tick()
	next("specs closed", pass{3, []brief{{"sysctl", Converged, "", false}, {"gpu-settings", Converged, "", false}}, false}, []int64{2, 3})

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
}
