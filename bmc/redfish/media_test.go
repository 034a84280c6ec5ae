package redfish

import (
	"context"
	"testing"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

const (
	iso      = "https://cache.rack-1.example/images/sha256/4f1c.iso"
	otherISO = "https://cache.rack-1.example/images/sha256/9a0b.iso"
)

func TestVirtualMedia(t *testing.T) {
	inserted := redfishsim.Media{Image: iso, Inserted: true, WriteProtected: true}
	cases := map[string]struct {
		sim     redfishsim.Config
		steps   func(ctx context.Context, d bmc.Driver) error
		want    redfishsim.Media
		code    proto.Code
		message string
	}{
		"insert": {
			steps: func(ctx context.Context, d bmc.Driver) error { return d.Insert(ctx, iso) },
			want:  inserted,
		},
		"insert twice": {
			steps: func(ctx context.Context, d bmc.Driver) error {
				if err := d.Insert(ctx, iso); err != nil {
					return err
				}
				return d.Insert(ctx, iso)
			},
			want: inserted,
		},
		"insert replaces": {
			steps: func(ctx context.Context, d bmc.Driver) error {
				if err := d.Insert(ctx, otherISO); err != nil {
					return err
				}
				return d.Insert(ctx, iso)
			},
			want: inserted,
		},
		"eject": {
			steps: func(ctx context.Context, d bmc.Driver) error {
				if err := d.Insert(ctx, iso); err != nil {
					return err
				}
				return d.Eject(ctx)
			},
		},
		"eject when empty": {
			steps: func(ctx context.Context, d bmc.Driver) error { return d.Eject(ctx) },
		},
		"insert without virtual media": {
			sim:     redfishsim.Config{NoVirtualMedia: true},
			steps:   func(ctx context.Context, d bmc.Driver) error { return d.Insert(ctx, iso) },
			code:    proto.Unsupported,
			message: "offers no virtual CD/DVD",
		},
		"eject without virtual media": {
			sim:     redfishsim.Config{NoVirtualMedia: true},
			steps:   func(ctx context.Context, d bmc.Driver) error { return d.Eject(ctx) },
			code:    proto.Unsupported,
			message: "offers no virtual CD/DVD",
		},
		"insert a file": {
			steps:   func(ctx context.Context, d bmc.Driver) error { return d.Insert(ctx, "/srv/images/x.iso") },
			code:    proto.InvalidConfig,
			message: "not an http or https URL",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sim := newSim(t, tc.sim)
			d := open(t, config(t, sim))
			checkErr(t, tc.steps(context.Background(), d), tc.code, tc.message)
			if diff := cmp.Diff(tc.want, sim.Media()); diff != "" {
				t.Errorf("media (-want +got):\n%s", diff)
			}
		})
	}
}
