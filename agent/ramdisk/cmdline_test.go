package ramdisk

import (
	"testing"

	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/google/go-cmp/cmp"
)

func TestParseCmdline(t *testing.T) {
	cases := map[string]struct {
		cmdline string
		want    Boot
		bad     bool
	}{
		"as a site's boot entry writes it": {
			cmdline: "console=ttyS0 bc.node=nd_1 bc.registry=https://10.0.0.1:7443 bc.pins=sha256/a,sha256/b,sha256/c bc.token=bcj_x\n",
			want:    Boot{Registry: "https://10.0.0.1:7443", Pins: joinwire.Pins{ServingCA: "sha256/a", JoinSigning: "sha256/b", JoinEncryption: "sha256/c"}, Token: "bcj_x", Node: "nd_1"},
		},
		"no token":   {cmdline: "bc.node=n bc.registry=https://r bc.pins=a,b,c", bad: true},
		"two pins":   {cmdline: "bc.node=n bc.registry=https://r bc.pins=a,b bc.token=t", bad: true},
		"no node id": {cmdline: "bc.registry=https://r bc.pins=a,b,c bc.token=t", bad: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseCmdline(tc.cmdline)
			if tc.bad != (err != nil) {
				t.Fatalf("err %v, want failure %v", err, tc.bad)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
