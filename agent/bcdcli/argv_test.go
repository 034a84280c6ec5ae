package bcdcli

import (
	"bytes"
	"flag"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/agent/join"
	"github.com/better-compute/better-compute/cmdline"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/google/go-cmp/cmp"
)

// TestTemplateArgvParsesWithBcdFlags parses the argv the user-data templates run with
// bcd's own flag definitions, so the templates and bcd cannot drift apart. The argv
// without pins (the specification's templates) is bcd's usage error at a pin flag: bcd
// refuses to bootstrap without them.
func TestTemplateArgvParsesWithBcdFlags(t *testing.T) {
	pins := joinwire.Pins{ServingCA: "sha256/a", JoinSigning: "sha256/b", JoinEncryption: "sha256/c"}
	cases := map[string]struct {
		argv []string
		want join.Options
		// refusedAt is the flag bcd's command line refuses the argv at; "" accepts it.
		refusedAt string
	}{
		"with pins": {
			argv: bcdargv.Join("https://registry.example:7443", "node_01", pins),
			want: join.Options{Server: "https://registry.example:7443", TokenFile: bcdargv.TokenFile, NodeID: "node_01", Role: "node", Pins: pins, ConfigDir: "/etc/bcd"},
		},
		"without pins": {
			argv:      bcdargv.Join("https://registry.example:7443", "node_01", joinwire.Pins{}),
			want:      join.Options{Server: "https://registry.example:7443", TokenFile: bcdargv.TokenFile, NodeID: "node_01", Role: "node", ConfigDir: "/etc/bcd"},
			refusedAt: "--join-encryption-pin",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.argv[0] != bcdargv.Path || tc.argv[1] != "join" {
				t.Fatalf("argv starts %q", tc.argv[:2])
			}
			_, err := Parse(tc.argv[1:], io.Discard)
			if err == nil && tc.refusedAt != "" || err != nil && (!cmdline.IsUsage(err) || proto.AsError(err).Details.Path != tc.refusedAt) {
				t.Fatalf("bcd's command line on %q: %v, want a refusal at %q", tc.argv, err, tc.refusedAt)
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

// TestJoinFlagsAreUsageErrors: `bcd join` with a required flag left out, or with a value
// it cannot join with, is a usage error at that flag (INVALID_INPUT, exit 2, with where its
// usage is), as better-compute's commands are, and writes nothing. Before, the values were
// checked as the join began: INVALID_CONFIG, exit 1.
func TestJoinFlagsAreUsageErrors(t *testing.T) {
	pin := "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
	good := map[string]string{"--server": "https://registry.example:7443", "--token-file": "/nonexistent/token",
		"--node-id": "node-1", "--serving-ca-pin": pin, "--join-signing-pin": pin, "--join-encryption-pin": pin}
	cases := map[string]struct {
		flag, value string // value "" leaves the flag out
	}{
		"no --server":             {"--server", ""},
		"no --token-file":         {"--token-file", ""},
		"no --join-signing-pin":   {"--join-signing-pin", ""},
		"an http --server":        {"--server", "http://registry.example:7443"},
		"a --node-id of no shape": {"--node-id", "Node 1"},
		"a --role of none":        {"--role", "boss"},
		"a pin of no shape":       {"--serving-ca-pin", "md5/x"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"join", "--config-dir", dir}
			for f, v := range good {
				if f == tc.flag {
					v = tc.value
				}
				if v != "" {
					args = append(args, f, v)
				}
			}
			if tc.flag == "--role" {
				args = append(args, tc.flag, tc.value)
			}
			var out, errOut bytes.Buffer
			code := Run(t.Context(), args, Env{Stdout: &out, Stderr: &errOut})
			if code != 2 || !strings.Contains(errOut.String(), "INVALID_INPUT") || !strings.Contains(errOut.String(), "at: "+tc.flag+"\n") ||
				!strings.Contains(errOut.String(), "run `bcd join --help` for its usage") {
				t.Errorf("exit %d, want 2 with INVALID_INPUT at %s:\n%s", code, tc.flag, errOut.String())
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("the refused join wrote %d files in its --config-dir", len(entries))
			}
		})
	}
}
