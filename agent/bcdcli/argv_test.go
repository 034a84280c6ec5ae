package bcdcli

import (
	"flag"
	"io"
	"testing"

	"github.com/better-compute/better-compute/agent/join"
	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/google/go-cmp/cmp"
)

// TestTemplateArgvParsesWithBcdFlags parses the argv the user-data templates run with
// bcd's own flag definitions, so the templates and bcd cannot drift apart.
func TestTemplateArgvParsesWithBcdFlags(t *testing.T) {
	pins := joinwire.Pins{ServingCA: "sha256/a", JoinSigning: "sha256/b", JoinEncryption: "sha256/c"}
	cases := map[string]struct {
		argv []string
		want join.Options
	}{
		"with pins": {
			argv: bcdargv.Join("https://registry.example:7443", "node_01", pins),
			want: join.Options{Server: "https://registry.example:7443", TokenFile: bcdargv.TokenFile, NodeID: "node_01", Role: "node", Pins: pins, ConfigDir: "/etc/bcd"},
		},
		"without pins": {
			argv: bcdargv.Join("https://registry.example:7443", "node_01", joinwire.Pins{}),
			want: join.Options{Server: "https://registry.example:7443", TokenFile: bcdargv.TokenFile, NodeID: "node_01", Role: "node", ConfigDir: "/etc/bcd"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.argv[0] != bcdargv.Path || tc.argv[1] != "join" {
				t.Fatalf("argv starts %q", tc.argv[:2])
			}
			if _, err := Parse(tc.argv[1:], io.Discard); err != nil {
				t.Fatalf("bcd's command line refuses %q: %v", tc.argv, err)
			}
			fs := flag.NewFlagSet("join", flag.ContinueOnError)
			got := join.Flags(fs)
			if err := fs.Parse(tc.argv[2:]); err != nil || fs.NArg() != 0 {
				t.Fatalf("parse %q: %v, left %q", tc.argv, err, fs.Args())
			}
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeArgvNamesAMode(t *testing.T) {
	argv := bcdargv.Node()
	if argv[0] != bcdargv.Path {
		t.Fatalf("argv starts %q", argv[0])
	}
	if _, ok := Lookup(argv[1]); !ok {
		t.Fatalf("bcd has no %q mode", argv[1])
	}
	if _, err := Parse(argv[1:], io.Discard); err != nil {
		t.Fatalf("bcd's command line refuses %q: %v", argv, err)
	}
}

func TestUsageExitsTwo(t *testing.T) {
	cases := map[string][]string{
		"no mode":      nil,
		"unknown mode": {"frobnicate"},
		"unknown flag": {"join", "--nope"},
		"stray arg":    {"join", "extra"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			if code := Run(t.Context(), args, Env{Stdout: io.Discard, Stderr: io.Discard}); code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
		})
	}
}
