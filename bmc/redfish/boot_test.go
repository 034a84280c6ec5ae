package redfish

import (
	"context"
	"testing"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

func TestSetBootDevice(t *testing.T) {
	cases := map[string]struct {
		sim        redfishsim.Config
		bootMode   string
		device     bmc.BootDevice
		persistent bool
		want       redfishsim.BootOverride
		code       proto.Code
		message    string
	}{
		"pxe once":            {device: bmc.BootPXE, want: redfishsim.BootOverride{Target: "Pxe", Enabled: "Once", Mode: "UEFI"}},
		"pxe persistent":      {device: bmc.BootPXE, persistent: true, want: redfishsim.BootOverride{Target: "Pxe", Enabled: "Continuous", Mode: "UEFI"}},
		"disk persistent":     {device: bmc.BootDisk, persistent: true, want: redfishsim.BootOverride{Target: "Hdd", Enabled: "Continuous", Mode: "UEFI"}},
		"cd once":             {device: bmc.BootCD, want: redfishsim.BootOverride{Target: "Cd", Enabled: "Once", Mode: "UEFI"}},
		"http sets UEFI":      {sim: redfishsim.Config{BootMode: "Legacy"}, device: bmc.BootHTTP, want: redfishsim.BootOverride{Target: "UefiHttp", Enabled: "Once", Mode: "UEFI"}},
		"pxe keeps legacy":    {sim: redfishsim.Config{BootMode: "Legacy"}, device: bmc.BootPXE, want: redfishsim.BootOverride{Target: "Pxe", Enabled: "Once", Mode: "Legacy"}},
		"option bootMode":     {bootMode: "legacy", device: bmc.BootDisk, want: redfishsim.BootOverride{Target: "Hdd", Enabled: "Once", Mode: "Legacy"}},
		"http not offered":    {sim: redfishsim.Config{BootTargets: []string{"None", "Pxe", "Hdd", "Cd"}}, device: bmc.BootHTTP, want: redfishsim.BootOverride{Target: "None", Enabled: "Disabled", Mode: "UEFI"}, code: proto.Unsupported, message: "offers no boot override target UefiHttp, only None, Pxe, Hdd, Cd"},
		"http is UEFI always": {bootMode: "legacy", device: bmc.BootHTTP, want: redfishsim.BootOverride{Target: "UefiHttp", Enabled: "Once", Mode: "UEFI"}},
		"unknown device":      {device: "floppy", want: redfishsim.BootOverride{Target: "None", Enabled: "Disabled", Mode: "UEFI"}, code: proto.InvalidConfig, message: `boot device "floppy"`},
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

// TestBootOnce: a one-time override is used by the next boot only; a persistent one by
// every boot.
func TestBootOnce(t *testing.T) {
	sim := newSim(t, redfishsim.Config{PowerState: "On"})
	d := open(t, config(t, sim))
	ctx := context.Background()
	steps := []func() error{
		func() error { return d.SetBootDevice(ctx, bmc.BootPXE, false) },
		func() error { return d.SetPower(ctx, bmc.ActionCycle) },
		func() error { return d.SetPower(ctx, bmc.ActionReset) },
		func() error { return d.SetBootDevice(ctx, bmc.BootCD, true) },
		func() error { return d.SetPower(ctx, bmc.ActionOff) },
		func() error { return d.SetPower(ctx, bmc.ActionOn) },
		func() error { return d.SetPower(ctx, bmc.ActionGracefulRestart) },
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
