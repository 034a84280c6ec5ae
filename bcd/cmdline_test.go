package main_test

import (
	"strings"
	"testing"

	"github.com/better-compute/better-compute/testkit"
)

// TestCommandLine: bcd's help (exit 0 when asked for, 2 with no mode), suggestions for a
// mistyped mode, usage errors at the flag, and shell completion, through the binary.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		exit   int
		stdout string
		stderr string
	}{
		{nil, 2, "", "Usage:\n  bcd COMMAND [flags]"},
		{[]string{"--help"}, 0, "Usage:\n  bcd COMMAND [flags]", ""},
		{[]string{"help", "join"}, 0, "Usage:\n  bcd join --server URL", ""},
		{[]string{"site", "-h"}, 0, "Usage:\n  bcd site --config FILE", ""},
		{[]string{"jion"}, 2, "", `unknown command "jion" for "bcd"; did you mean "join"?`},
		{[]string{"site", "--confg", "x"}, 2, "", `unknown flag: --confg; did you mean "--config"?`},
		{[]string{"node", "extra"}, 2, "", "bcd node takes no arguments"},
		{[]string{"completion", "bash"}, 0, "bash completion", ""},
		{[]string{"__complete", "jo"}, 0, "join\t", ""},
	} {
		res := testkit.BCD(t, tc.args...)
		if res.Code != tc.exit || !strings.Contains(res.Stdout, tc.stdout) || !strings.Contains(res.Stderr, tc.stderr) {
			t.Errorf("bcd %v: exit %d (want %d)\nstdout: %s\nstderr: %s", tc.args, res.Code, tc.exit, res.Stdout, res.Stderr)
		}
	}
}
