package qmp

import (
	"context"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// TestBootOrderVM sets boot devices on a real VM and reads what SeaBIOS boots from: a
// one-time device is first at the next boot only.
func TestBootOrderVM(t *testing.T) {
	v := startVM(t)
	d := v.open(t, v.config())
	ctx := context.Background()
	setBoot := func(device proto.BootDevice, persistent bool) func() error {
		return func() error { return d.SetBootDevice(ctx, device, persistent) }
	}
	power := func(action proto.PowerAction) func() error {
		return func() error { return d.SetPower(ctx, action) }
	}
	steps := []struct {
		name string
		do   func() error
		// indexes are the bootindex properties after the step.
		indexes map[string]int
		// boots lists what each boot so far tried first, once the step has booted.
		boots []string
	}{
		{
			name:    "disk persistent",
			do:      setBoot(proto.BootDeviceDisk, true),
			indexes: map[string]int{"disk0": 10, "nic0": 20, "cd0": 30},
		},
		{
			name:    "pxe once",
			do:      setBoot(proto.BootDevicePXE, false),
			indexes: map[string]int{"disk0": 10, "nic0": 2, "cd0": 30},
		},
		{
			name:    "on boots the NIC",
			do:      power(proto.PowerActionOn),
			indexes: map[string]int{"disk0": 10, "nic0": 7, "cd0": 30},
			boots:   []string{"ROM"},
		},
		{
			name:    "reset boots the disk",
			do:      power(proto.PowerActionReset),
			indexes: map[string]int{"disk0": 10, "nic0": 20, "cd0": 30},
			boots:   []string{"ROM", "Hard Disk"},
		},
		{
			name:    "cd once",
			do:      setBoot(proto.BootDeviceCD, false),
			indexes: map[string]int{"disk0": 10, "nic0": 20, "cd0": 3},
		},
		{
			name:    "cycle boots the CD",
			do:      power(proto.PowerActionCycle),
			indexes: map[string]int{"disk0": 10, "nic0": 20, "cd0": 8},
			boots:   []string{"ROM", "Hard Disk", "DVD/CD"},
		},
		{
			name:    "http persistent is the NIC",
			do:      setBoot(proto.BootDeviceHTTP, true),
			indexes: map[string]int{"disk0": 20, "nic0": 10, "cd0": 30},
		},
		{
			name:    "reset boots the NIC",
			do:      power(proto.PowerActionReset),
			indexes: map[string]int{"disk0": 20, "nic0": 10, "cd0": 30},
			boots:   []string{"ROM", "Hard Disk", "DVD/CD", "ROM"},
		},
		{
			name:    "reset boots the NIC again",
			do:      power(proto.PowerActionReset),
			indexes: map[string]int{"disk0": 20, "nic0": 10, "cd0": 30},
			boots:   []string{"ROM", "Hard Disk", "DVD/CD", "ROM", "ROM"},
		},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := s.do(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(s.indexes, v.bootIndexes(t)); diff != "" {
				t.Errorf("bootindex (-want +got):\n%s", diff)
			}
			if s.boots != nil {
				if diff := cmp.Diff(s.boots, v.waitBoots(t, len(s.boots))); diff != "" {
					t.Errorf("boots (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestBootDeviceUnbound: a device the binding does not name is UNSUPPORTED.
func TestBootDeviceUnbound(t *testing.T) {
	v := startVM(t)
	cfg := v.config()
	delete(cfg.Options, optCD)
	d := v.open(t, cfg)
	err := d.SetBootDevice(context.Background(), proto.BootDeviceCD, true)
	if proto.CodeOf(err) != proto.Unsupported {
		t.Fatalf("cd without option cd: %v", err)
	}
	if err := d.SetBootDevice(context.Background(), "usb", true); proto.CodeOf(err) != proto.InvalidConfig {
		t.Fatalf("usb: %v", err)
	}
}
