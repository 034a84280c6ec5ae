package bmc

import (
	"context"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
)

// Timing bounds a driver's waits for an asynchronous BMC.
type Timing struct {
	// Timeout is the longest a power change or media change may take to show.
	Timeout time.Duration
	// Interval is the time between two reads of the state.
	Interval time.Duration
}

// The default timing: below power.setPower's 5m step timeout, so the driver's own
// TIMEOUT, which says which state the machine is stuck in, comes first.
const (
	DefaultTimeout  = 4 * time.Minute
	DefaultInterval = 2 * time.Second
)

// TimingOptions reads the options powerTimeout (at most proto.MaxPowerTimeout: a wait
// no site command could finish is refused, not cut short) and pollInterval.
func TimingOptions(options map[string]string) (Timing, error) {
	timeout, err := DurationOption(options, proto.BMCOptionPowerTimeout, DefaultTimeout)
	if err != nil {
		return Timing{}, err
	}
	if timeout > proto.MaxPowerTimeout {
		return Timing{}, proto.Errorf(proto.InvalidConfig, "option powerTimeout %s is longer than a site runs one command: name at most %s", options[proto.BMCOptionPowerTimeout], proto.MaxPowerTimeout).WithPath("options." + proto.BMCOptionPowerTimeout)
	}
	interval, err := DurationOption(options, "pollInterval", DefaultInterval)
	if err != nil {
		return Timing{}, err
	}
	return Timing{Timeout: timeout, Interval: interval}, nil
}

// WaitPower polls p until it reports want. It is TIMEOUT, naming the state the machine
// is left in, when t.Timeout passes or ctx ends first.
func WaitPower(ctx context.Context, p Power, want proto.PowerState, t Timing) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	var last proto.PowerState
	for {
		got, err := p.GetPower(ctx)
		switch {
		case err == nil && got == want:
			return nil
		case err == nil:
			last = got
		case !Expired(ctx):
			return err
		}
		if Expired(ctx) || clock.Sleep(ctx, clock.Real{}, t.Interval) != nil {
			waited := time.Since(start).Round(time.Millisecond)
			if last == "" {
				return proto.Errorf(proto.Timeout, "waited %s for the machine to be %s: %v", waited, want, err)
			}
			return proto.Errorf(proto.Timeout, "the machine is still %s, not %s, after %s", last, want, waited)
		}
	}
}

// Expired reports whether ctx has ended or its deadline has passed: a dial or read
// bounded by the deadline may fail a moment before ctx itself reports it.
func Expired(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}
