package ramdisk

import (
	"strings"
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

// FuzzParseCmdline reads any kernel command line: an accepted one names every bc.*
// value, three pins, and parses back the same when written as a site's boot entry does.
func FuzzParseCmdline(f *testing.F) {
	f.Add("console=ttyS0 bc.node=nd_1 bc.registry=https://10.0.0.1:7443 bc.pins=sha256/a,sha256/b,sha256/c bc.token=bcj_x\n")
	f.Add("bc.node=n bc.registry=https://r bc.pins=a,b")
	f.Add("bc.node= bc.registry=x=y bc.pins=,, bc.token=t")
	f.Fuzz(func(t *testing.T, cmdline string) {
		b, err := ParseCmdline(cmdline)
		if err != nil {
			return
		}
		for _, v := range []string{b.Registry, b.Token, b.Node} {
			if v == "" || strings.ContainsAny(v, " \t\n") {
				t.Fatalf("value %q of %q", v, cmdline)
			}
		}
		for _, pin := range []string{b.Pins.ServingCA, b.Pins.JoinSigning, b.Pins.JoinEncryption} {
			if strings.ContainsAny(pin, ", \t\n") {
				t.Fatalf("pin %q of %q", pin, cmdline)
			}
		}
		again, err := ParseCmdline("bc.registry=" + b.Registry + " bc.pins=" + b.Pins.ServingCA + "," + b.Pins.JoinSigning + "," + b.Pins.JoinEncryption + " bc.token=" + b.Token + " bc.node=" + b.Node)
		if err != nil || again != b {
			t.Fatalf("%+v does not survive writing: %+v %v", b, again, err)
		}
	})
}
