package userdata_test

import (
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/agent/bcdcli"
	"github.com/better-compute/better-compute/agent/join"
	"github.com/better-compute/better-compute/cmdline"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/userdata"
	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

// renderedArgv renders a shipped template and reads back the argv it runs bcd with:
// the join and the node agent.
func renderedArgv(t *testing.T, cfg userdata.Config, ud profile.UserData) (joinArgv, nodeArgv []string) {
	t.Helper()
	box, err := secret.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	r, err := userdata.New(cfg, box)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := r.Preview(ud, "gpu_01")
	if err != nil {
		t.Fatal(err)
	}
	execStart := func(unit string) []string {
		for line := range strings.Lines(unit) {
			if cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecStart="); ok {
				return strings.Fields(cmd)
			}
		}
		t.Fatalf("no ExecStart in\n%s", unit)
		return nil
	}
	switch ud.Kind {
	case "cloud-init":
		var cc struct {
			WriteFiles []struct{ Path, Content string } `yaml:"write_files"`
			Runcmd     [][]string                       `yaml:"runcmd"`
		}
		if err := yaml.Unmarshal(doc, &cc); err != nil {
			t.Fatal(err)
		}
		return cc.Runcmd[1], execStart(cc.WriteFiles[1].Content)
	default:
		var c struct {
			Systemd struct {
				Units []struct{ Name, Contents string }
			}
		}
		if err := json.Unmarshal(doc, &c); err != nil {
			t.Fatal(err)
		}
		return execStart(c.Systemd.Units[0].Contents), execStart(c.Systemd.Units[1].Contents)
	}
}

// TestRenderedArgvParsesWithBcdFlags parses the argv both shipped templates run bcd
// with, with bcd's own command line and flag definitions, so they cannot drift apart. The
// argv rendered without pins is bcd's usage error at a pin flag: bcd refuses to
// bootstrap without them.
func TestRenderedArgvParsesWithBcdFlags(t *testing.T) {
	noPins := config()
	noPins.Pins = nil
	for name, tc := range map[string]struct {
		cfg userdata.Config
		ud  profile.UserData
	}{
		"cloud-init":        {config(), cloudInit},
		"cloud-init nopins": {noPins, cloudInit},
		"ignition":          {config(), ign},
		"ignition nopins":   {noPins, ign},
	} {
		t.Run(name, func(t *testing.T) {
			joinArgv, nodeArgv := renderedArgv(t, tc.cfg, tc.ud)
			if joinArgv[0] != bcdargv.Path || joinArgv[1] != "join" {
				t.Fatalf("join argv starts %q", joinArgv[:2])
			}
			_, err := bcdcli.Parse(joinArgv[1:], io.Discard)
			switch {
			case tc.cfg.Pins != nil && err != nil:
				t.Fatalf("bcd's command line refuses %q: %v", joinArgv, err)
			case tc.cfg.Pins == nil && (!cmdline.IsUsage(err) || proto.AsError(err).Details.Path != "--join-encryption-pin"):
				t.Fatalf("bcd's command line on %q without pins: %v, want a usage error at --join-encryption-pin", joinArgv, err)
			}
			fs := flag.NewFlagSet("join", flag.ContinueOnError)
			got := join.Flags(fs)
			if err := fs.Parse(joinArgv[2:]); err != nil || fs.NArg() != 0 {
				t.Fatalf("parse %q: %v, left %q", joinArgv, err, fs.Args())
			}
			want := join.Options{Server: tc.cfg.ControlPlaneURL, TokenFile: bcdargv.TokenFile, NodeID: "gpu_01", Role: joinwire.RoleNode, ConfigDir: bcdargv.ConfigDir}
			if tc.cfg.Pins != nil {
				want.Pins = *tc.cfg.Pins
			}
			if diff := cmp.Diff(want, *got); diff != "" {
				t.Errorf("bcd join options (-want +got):\n%s", diff)
			}

			if diff := cmp.Diff(bcdargv.Node(), nodeArgv); diff != "" {
				t.Errorf("node agent argv (-want +got):\n%s", diff)
			}
			if _, ok := bcdcli.Lookup(nodeArgv[1]); !ok {
				t.Skipf("bcd has no %q mode yet: the agent session brings it", nodeArgv[1])
			}
			if _, err := bcdcli.Parse(nodeArgv[1:], io.Discard); err != nil {
				t.Fatalf("bcd's command line refuses %q: %v", nodeArgv, err)
			}
		})
	}
}
