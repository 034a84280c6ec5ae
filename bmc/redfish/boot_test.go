package redfish

import (
	"context"
	"testing"

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
	"github.com/stmcginnis/gofish/schemas"
)

// TestSetBootDevice: the boot overrides sushy-tools cannot show (TestSushyBootOverride
// drives the rest): a BMC that tells a one-time override from a persistent one, keeps
// UEFI HTTP boot as UefiHttp with the mode it switches to, and a legacy mode a Pxe
// override keeps.
func TestSetBootDevice(t *testing.T) {
	cases := map[string]struct {
		sim        redfishsim.Config
		bootMode   string
		device     proto.BootDevice
		persistent bool
		want       redfishsim.BootOverride
		code       proto.Code
		message    string
	}{
		"pxe once":            {device: proto.BootDevicePXE, want: redfishsim.BootOverride{Target: "Pxe", Enabled: "Once", Mode: "UEFI"}},
		"pxe persistent":      {device: proto.BootDevicePXE, persistent: true, want: redfishsim.BootOverride{Target: "Pxe", Enabled: "Continuous", Mode: "UEFI"}},
		"http sets UEFI":      {sim: redfishsim.Config{BootMode: "Legacy"}, device: proto.BootDeviceHTTP, want: redfishsim.BootOverride{Target: "UefiHttp", Enabled: "Once", Mode: "UEFI"}},
		"pxe keeps legacy":    {sim: redfishsim.Config{BootMode: "Legacy"}, device: proto.BootDevicePXE, want: redfishsim.BootOverride{Target: "Pxe", Enabled: "Once", Mode: "Legacy"}},
		"http is UEFI always": {bootMode: "legacy", device: proto.BootDeviceHTTP, want: redfishsim.BootOverride{Target: "UefiHttp", Enabled: "Once", Mode: "UEFI"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sim := newSim(t, tc.sim)
			cfg := config(t, sim)
			if tc.bootMode != "" {
				cfg.Options[optBootMode] = tc.bootMode
			}
			d := open(t, cfg)
			checkErr(t, d.SetBootDevice(context.Background(), tc.device, tc.persistent), tc.code, tc.message)
			if diff := cmp.Diff(tc.want, sim.Boot()); diff != "" {
				t.Errorf("boot override (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadBack: what a BMC may report instead of the override asked, and what it may not.
func TestReadBack(t *testing.T) {
	once, continuous, disabled := schemas.OnceBootSourceOverrideEnabled, schemas.ContinuousBootSourceOverrideEnabled, schemas.DisabledBootSourceOverrideEnabled
	enabled := []struct {
		asked, got schemas.BootSourceOverrideEnabled
		same       bool
	}{
		{once, once, true},
		{once, continuous, true},
		{continuous, continuous, true},
		{continuous, once, false},
		{once, disabled, false},
		{continuous, disabled, false},
	}
	for _, c := range enabled {
		if got := sameEnabled(c.asked, c.got); got != c.same {
			t.Errorf("sameEnabled(%s, %s) = %v", c.asked, c.got, got)
		}
	}
	targets := []struct {
		asked, got schemas.BootSource
		same       bool
	}{
		{schemas.PxeBootSource, schemas.PxeBootSource, true},
		{schemas.UefiHTTPBootSource, schemas.UefiHTTPBootSource, true},
		{schemas.UefiHTTPBootSource, schemas.PxeBootSource, true},
		{schemas.PxeBootSource, schemas.UefiHTTPBootSource, false},
		{schemas.HddBootSource, schemas.PxeBootSource, false},
		{schemas.CdBootSource, schemas.HddBootSource, false},
	}
	for _, c := range targets {
		if got := sameTarget(c.asked, c.got); got != c.same {
			t.Errorf("sameTarget(%s, %s) = %v", c.asked, c.got, got)
		}
	}
}

// TestBootOnce: a one-time override is used by the next boot only; a persistent one by
// every boot.
func TestBootOnce(t *testing.T) {
	sim := newSim(t, redfishsim.Config{PowerState: "On"})
	d := open(t, config(t, sim))
	ctx := context.Background()
	steps := []func() error{
		func() error { return d.SetBootDevice(ctx, proto.BootDevicePXE, false) },
		func() error { return d.SetPower(ctx, proto.PowerActionCycle) },
		func() error { return d.SetPower(ctx, proto.PowerActionReset) },
		func() error { return d.SetBootDevice(ctx, proto.BootDeviceCD, true) },
		func() error { return d.SetPower(ctx, proto.PowerActionOff) },
		func() error { return d.SetPower(ctx, proto.PowerActionOn) },
		func() error { return d.SetPower(ctx, proto.PowerActionGracefulRestart) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if diff := cmp.Diff([]string{"Pxe", "Hdd", "Cd", "Cd"}, sim.Boots()); diff != "" {
		t.Errorf("boots (-want +got):\n%s", diff)
	}
}
