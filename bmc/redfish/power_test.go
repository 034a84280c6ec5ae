package redfish

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// TestSetPower: the power actions on the BMCs sushy-tools cannot be (TestSushyPower
// drives the rest): one that performs PowerCycle and Nmi, lists its reset types in an
// ActionInfo or not at all, or runs an OS that ignores GracefulShutdown.
func TestSetPower(t *testing.T) {
	noCycle := []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "Nmi"}
	noNMI := []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "PowerCycle"}
	cases := map[string]struct {
		sim     redfishsim.Config
		action  proto.PowerAction
		resets  []string
		state   string
		boots   []string
		code    proto.Code
		message string
	}{
		"graceful-off ignored by the OS":   {sim: redfishsim.Config{PowerState: "On", IgnoreGracefulShutdown: true}, action: proto.PowerActionGracefulOff, resets: []string{"GracefulShutdown"}, state: "On", code: proto.Timeout, message: "the machine is still on, not off"},
		"cycle":                            {sim: redfishsim.Config{PowerState: "On"}, action: proto.PowerActionCycle, resets: []string{"PowerCycle"}, state: "On", boots: []string{"Hdd"}},
		"cycle without PowerCycle in info": {sim: redfishsim.Config{PowerState: "On", ResetTypes: noCycle, Advertise: redfishsim.InActionInfo}, action: proto.PowerActionCycle, resets: []string{"ForceOff", "On"}, state: "On", boots: []string{"Hdd"}},
		"cycle refused, unlisted":          {sim: redfishsim.Config{PowerState: "On", ResetTypes: noCycle, Advertise: redfishsim.Unlisted}, action: proto.PowerActionCycle, state: "On", code: proto.DriverError, message: "HTTP 400: The value 'PowerCycle' for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values."},
		"nmi":                              {sim: redfishsim.Config{PowerState: "On"}, action: proto.PowerActionNMI, resets: []string{"Nmi"}, state: "On"},
		"nmi not offered":                  {sim: redfishsim.Config{PowerState: "On", ResetTypes: noNMI}, action: proto.PowerActionNMI, state: "On", code: proto.Unsupported, message: "offers no reset type Nmi"},
		"nmi not offered, in info":         {sim: redfishsim.Config{PowerState: "On", ResetTypes: noNMI, Advertise: redfishsim.InActionInfo}, action: proto.PowerActionNMI, state: "On", code: proto.Unsupported, message: "offers no reset type Nmi"},
		"nmi refused, unlisted":            {sim: redfishsim.Config{PowerState: "On", ResetTypes: noNMI, Advertise: redfishsim.Unlisted}, action: proto.PowerActionNMI, state: "On", code: proto.DriverError, message: "The value 'Nmi' for the parameter ResetType"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tc.sim.Delay = 30 * time.Millisecond
			sim := newSim(t, tc.sim)
			cfg := config(t, sim)
			if tc.code == proto.Timeout {
				cfg.Options["powerTimeout"] = "200ms"
			}
			d := open(t, cfg)
			err := d.SetPower(context.Background(), tc.action)
			checkErr(t, err, tc.code, tc.message)
			if diff := cmp.Diff(tc.resets, sim.Resets()); diff != "" {
				t.Errorf("resets (-want +got):\n%s", diff)
			}
			if got := sim.PowerState(); got != tc.state {
				t.Errorf("power state %s, want %s", got, tc.state)
			}
			if diff := cmp.Diff(tc.boots, sim.Boots()); diff != "" {
				t.Errorf("boots (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetPower(t *testing.T) {
	cases := map[string]struct {
		initial string
		action  proto.PowerAction
		want    proto.PowerState
	}{
		"powering on":  {initial: "Off", action: proto.PowerActionOn, want: proto.PowerStatePoweringOn},
		"powering off": {initial: "On", action: proto.PowerActionOff, want: proto.PowerStatePoweringOff},
		"paused":       {initial: "Paused", want: proto.PowerStatePaused},
		"unknown":      {initial: "Sleeping", want: proto.PowerStateUnknown},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sim := newSim(t, redfishsim.Config{PowerState: tc.initial, Delay: time.Hour})
			cfg := config(t, sim)
			cfg.Options["powerTimeout"] = "20ms"
			d := open(t, cfg)
			if tc.action != "" {
				// The transition takes an hour: SetPower times out, the state stays between.
				checkErr(t, d.SetPower(context.Background(), tc.action), proto.Timeout, "")
			}
			got, err := d.GetPower(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestLongWaitNotCutShort: a graceful power-off the OS ignores is polled at the
// binding's pollInterval until its powerTimeout: the call ends in TIMEOUT naming the
// state, whatever the number of polls. Each poll lists the systems collection, whose
// member counted against the call's maxMembers: past 4096 polls the wait failed
// DRIVER_ERROR "the collection lists over 4096 members", minutes before its timeout
// with a short pollInterval.
func TestLongWaitNotCutShort(t *testing.T) {
	sim := newSim(t, redfishsim.Config{PowerState: "On", IgnoreGracefulShutdown: true})
	d := open(t, pinned(t, strings.TrimPrefix(sim.URL, "https://"), sim.Certificate.PublicKey, "1ms", "25s"))
	err := d.SetPower(context.Background(), proto.PowerActionGracefulOff)
	checkErr(t, err, proto.Timeout, "")
}
