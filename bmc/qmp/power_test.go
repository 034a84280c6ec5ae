package qmp

import (
	"context"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// TestPowerVM walks one real VM through the power actions; each step starts where the
// one before left the VM.
func TestPowerVM(t *testing.T) {
	v := startVM(t)
	d := v.open(t, v.config())
	steps := []struct {
		name     string
		action   proto.PowerAction
		code     proto.Code
		runState string
		power    proto.PowerState
	}{
		{name: "held before start", runState: "prelaunch", power: proto.PowerStateOff},
		{name: "on", action: proto.PowerActionOn, runState: "running", power: proto.PowerStateOn},
		{name: "on when on", action: proto.PowerActionOn, runState: "running", power: proto.PowerStateOn},
		{name: "off", action: proto.PowerActionOff, runState: "paused", power: proto.PowerStateOff},
		{name: "off when off", action: proto.PowerActionOff, runState: "paused", power: proto.PowerStateOff},
		{name: "graceful-off when off", action: proto.PowerActionGracefulOff, runState: "paused", power: proto.PowerStateOff},
		{name: "reset when off", action: proto.PowerActionReset, runState: "running", power: proto.PowerStateOn},
		{name: "reset", action: proto.PowerActionReset, runState: "running", power: proto.PowerStateOn},
		{name: "cycle", action: proto.PowerActionCycle, runState: "running", power: proto.PowerStateOn},
		{name: "nmi", action: proto.PowerActionNMI, runState: "running", power: proto.PowerStateOn},
		// The firmware, with no OS behind it, ignores the ACPI power button.
		{name: "graceful-off ignored", action: proto.PowerActionGracefulOff, code: proto.Timeout, runState: "running", power: proto.PowerStateOn},
		{name: "graceful-restart ignored", action: proto.PowerActionGracefulRestart, code: proto.Timeout, runState: "running", power: proto.PowerStateOn},
		{name: "off again", action: proto.PowerActionOff, runState: "paused", power: proto.PowerStateOff},
		{name: "graceful-restart when off", action: proto.PowerActionGracefulRestart, runState: "running", power: proto.PowerStateOn},
		{name: "graceful-off, forced", action: proto.PowerActionOff, runState: "paused", power: proto.PowerStateOff},
		{name: "cycle when off", action: proto.PowerActionCycle, runState: "running", power: proto.PowerStateOn},
		{name: "unknown action", action: "suspend", code: proto.InvalidConfig, runState: "running", power: proto.PowerStateOn},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.action != "" {
				err := d.SetPower(context.Background(), s.action)
				if proto.CodeOf(err) != s.code && !(err == nil && s.code == "") {
					t.Fatalf("SetPower(%s): %v, want %s", s.action, err, s.code)
				}
			}
			if got := v.runState(t); got != s.runState {
				t.Errorf("run state %s, want %s", got, s.runState)
			}
			if got, err := d.GetPower(context.Background()); err != nil || got != s.power {
				t.Errorf("GetPower = %s, %v; want %s", got, err, s.power)
			}
		})
	}
}
