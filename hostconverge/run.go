package hostconverge

import (
	"context"
	"time"

	"github.com/better-compute/better-compute/clock"
)

// DefaultPeriod is how often Run converges again when Converger.Period is zero: often
// enough that drift is set back within minutes, rare enough that the read-only queries
// of a converged pass (a few nvidia-smi and systemctl calls) cost the host nothing.
const DefaultPeriod = time.Minute

// Clock times Run's period: a clock.Clock (clock.Fake in tests, which advance it by
// hand).
type Clock interface {
	// NewTimer returns a timer that fires once d has passed.
	NewTimer(d time.Duration) clock.Timer
}

// Reporter receives what Run does; the node agent implements it, and decides from the
// reports when a generation is acknowledged (Applied tells a pass that applied it).
type Reporter interface {
	// Report receives the results of every pass, drift corrections included.
	Report(generation int64, results []UnitResult)
}

// Run converges the specs it receives until ctx ends: a pass as soon as a spec arrives
// (the newest, when several wait), then one every period to set drift back. Each pass is
// reported. Failed units are tried again on the period. Run waits for a first spec
// before its first pass; once specs is closed it keeps converging the last one. It
// returns ctx's error. It starts by removing the files holding a secret that an earlier
// run left, as every pass does, so that none waits for a first spec.
func (c *Converger) Run(ctx context.Context, specs <-chan Spec, r Reporter) error {
	c.removePrivateFiles()
	clk, period := c.Clock, c.Period
	if clk == nil {
		clk = clock.Real{}
	}
	if period <= 0 {
		period = DefaultPeriod
	}
	var (
		spec  Spec
		have  bool
		timer clock.Timer // the period, from the end of the last pass
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var pending <-chan time.Time
		if timer != nil {
			pending = timer.C()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case s, ok := <-specs:
			if !ok {
				specs = nil
				continue
			}
			spec, have = latest(s, specs), true
		case <-pending:
		}
		if !have {
			continue
		}
		if timer != nil {
			timer.Stop() // a spec that came first starts the period again
		}
		results := c.Converge(ctx, spec)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.Report(spec.Generation, results)
		timer = clk.NewTimer(period)
	}
}

// latest returns the newest spec waiting on specs, or s.
func latest(s Spec, specs <-chan Spec) Spec {
	for {
		select {
		case next, ok := <-specs:
			if !ok {
				return s
			}
			s = next
		default:
			return s
		}
	}
}
