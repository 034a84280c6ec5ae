package qmp

import (
	"context"
	"testing"

	"github.com/better-compute/better-compute/bmc"
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
		power    bmc.PowerState
	}{
		{name: "held before start", runState: "prelaunch", power: bmc.PowerOff},
		{name: "on", action: proto.PowerActionOn, runState: "running", power: bmc.PowerOn},
		{name: "on when on", action: proto.PowerActionOn, runState: "running", power: bmc.PowerOn},
		{name: "off", action: proto.PowerActionOff, runState: "paused", power: bmc.PowerOff},
		{name: "off when off", action: proto.PowerActionOff, runState: "paused", power: bmc.PowerOff},
		{name: "graceful-off when off", action: proto.PowerActionGracefulOff, runState: "paused", power: bmc.PowerOff},
		{name: "reset when off", action: proto.PowerActionReset, runState: "running", power: bmc.PowerOn},
		{name: "reset", action: proto.PowerActionReset, runState: "running", power: bmc.PowerOn},
		{name: "cycle", action: proto.PowerActionCycle, runState: "running", power: bmc.PowerOn},
		{name: "nmi", action: proto.PowerActionNMI, runState: "running", power: bmc.PowerOn},
		// The firmware, with no OS behind it, ignores the ACPI power button.
		{name: "graceful-off ignored", action: proto.PowerActionGracefulOff, code: proto.Timeout, runState: "running", power: bmc.PowerOn},
		{name: "graceful-restart ignored", action: proto.PowerActionGracefulRestart, code: proto.Timeout, runState: "running", power: bmc.PowerOn},
		{name: "off again", action: proto.PowerActionOff, runState: "paused", power: bmc.PowerOff},
		{name: "graceful-restart when off", action: proto.PowerActionGracefulRestart, runState: "running", power: bmc.PowerOn},
		{name: "graceful-off, forced", action: proto.PowerActionOff, runState: "paused", power: bmc.PowerOff},
		{name: "cycle when off", action: proto.PowerActionCycle, runState: "running", power: bmc.PowerOn},
		{name: "unknown action", action: "suspend", code: proto.InvalidConfig, runState: "running", power: bmc.PowerOn},
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
