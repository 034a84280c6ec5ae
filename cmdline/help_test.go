package cmdline_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/better-compute/better-compute/agent/bcdcli"
	"github.com/better-compute/better-compute/cli"
)

// TestHelpFitsAHundredColumns renders the help of every command of both binaries and
// checks each line.
func TestHelpFitsAHundredColumns(t *testing.T) {
	binaries := map[string]struct {
		root *cobra.Command
		run  func(args []string, out io.Writer) int
	}{
		"better-compute": {cli.Root(cli.Env{}), func(args []string, out io.Writer) int {
			return cli.Run(context.Background(), args, cli.Env{Stdout: out, Stderr: out, Getenv: os.Getenv})
		}},
		"bcd": {bcdcli.Root(bcdcli.Env{}), func(args []string, out io.Writer) int {
			return bcdcli.Run(context.Background(), args, bcdcli.Env{Stdout: out, Stderr: out})
		}},
	}
	for name, b := range binaries {
		t.Run(name, func(t *testing.T) {
			var visit func(c *cobra.Command)
			visit = func(c *cobra.Command) {
				var out bytes.Buffer
				if code := b.run(append(strings.Fields(c.CommandPath())[1:], "--help"), &out); code != 0 {
					t.Errorf("%s --help: exit %d\n%s", c.CommandPath(), code, out.String())
				}
				for _, line := range strings.Split(out.String(), "\n") {
					if len(line) > 100 {
						t.Errorf("%s --help: a line of %d columns:\n%s", c.CommandPath(), len(line), line)
					}
				}
				for _, sub := range c.Commands() {
					if !sub.Hidden {
						visit(sub)
					}
				}
			}
			visit(b.root)
		})
	}
}
