// Package bcdcli is bcd's command line: a table of modes, each one entry that declares
// its flags (in the mode's own package, exported so tests parse argv exactly as bcd
// does) and returns what runs it. bcd/main.go only calls Run.
package bcdcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/better-compute/better-compute/cmdline"
	"github.com/better-compute/better-compute/proto"
)

// Env is what a mode runs with; tests give their own writers.
type Env struct {
	Stdout, Stderr io.Writer
}

// Runner runs a mode whose flags are parsed.
type Runner func(ctx context.Context, env Env) error

// Mode is one way bcd runs, such as `bcd join`.
type Mode struct {
	// Name is the word after bcd.
	Name string
	// Usage shows the flags after the name.
	Usage string
	// Summary is one line for the mode list.
	Summary string
	// Define declares the mode's flags on fs and returns what runs it.
	Define func(fs *flag.FlagSet) Runner
}

// Modes is every mode, in the order help lists them.
func Modes() []Mode {
	return []Mode{joinMode, siteMode, nodeMode, ramdiskMode}
}

// Lookup finds a mode by name.
func Lookup(name string) (Mode, bool) {
	for _, m := range Modes() {
		if m.Name == name {
			return m, true
		}
	}
	return Mode{}, false
}

// Root is bcd's command tree; its modes run with env.
func Root(env Env) *cobra.Command {
	var run Runner
	return newRoot(env, &run)
}

// newRoot is bcd's command tree, each mode's command setting chosen to what runs it.
func newRoot(env Env, chosen *Runner) *cobra.Command {
	root := &cobra.Command{
		Use:   "bcd",
		Short: "the agent of better-compute on machines and sites",
		Long: "bcd joins the registry with a single-use token (`bcd join`), then runs as a node's agent " +
			"(`bcd node`), the deploy ramdisk's (`bcd ramdisk`) or a rack's site agent (`bcd site`). " +
			"It exits 0 when done, 1 when the mode failed and 2 when the command line is wrong.",
	}
	for _, m := range Modes() {
		gofs := flag.NewFlagSet("bcd "+m.Name, flag.ContinueOnError)
		run := m.Define(gofs)
		c := &cobra.Command{Use: strings.TrimSpace(m.Name + " " + m.Usage), Short: m.Summary, Args: cmdline.Args(0, "")}
		c.Flags().AddGoFlagSet(gofs)
		cmdline.RequireMarked(c.Flags())
		c.RunE = func(*cobra.Command, []string) error {
			*chosen = run
			return nil
		}
		root.AddCommand(c)
	}
	cmdline.Setup(root)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	return root
}

// Parse reads a command line (without the program name) with bcd's own flags: the mode
// and its flags, no positional arguments. Usage problems are written to stderr;
// flag.ErrHelp is a help shown on request, nothing to run.
func Parse(args []string, stderr io.Writer) (Runner, error) {
	run, _, err := parse(context.Background(), args, Env{Stdout: stderr, Stderr: stderr})
	return run, err
}

// parse runs bcd's command tree on args up to the choice of a mode, and returns what runs
// it and its command; a usage error is printed to env.Stderr.
func parse(ctx context.Context, args []string, env Env) (Runner, *cobra.Command, error) {
	var run Runner
	c, err := cmdline.Execute(ctx, newRoot(env, &run), args)
	switch {
	case err != nil && !cmdline.Shown(err):
		printError(env, cmdline.JSONAsked(args), "bcd", err)
		if !cmdline.JSONAsked(args) {
			fmt.Fprintln(env.Stderr, cmdline.HelpHint(c))
		}
		return nil, c, err
	case err != nil:
		return nil, c, err
	case run == nil:
		return nil, c, flag.ErrHelp
	}
	return run, c, nil
}

// Run runs bcd's command line and returns the exit status: 0 done, 1 the mode failed,
// 2 the command line is wrong.
func Run(ctx context.Context, args []string, env Env) int {
	run, c, err := parse(ctx, args, env)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		return 2
	}
	if err := run(ctx, env); err != nil {
		asJSON := cmdline.JSONAsked(args)
		for _, err := range proto.Joined(err) {
			printError(env, asJSON, c.CommandPath(), err)
		}
		if cmdline.IsUsage(err) {
			if !asJSON {
				fmt.Fprintln(env.Stderr, cmdline.HelpHint(c))
			}
			return 2
		}
		return 1
	}
	return 0
}

// printError writes one error: who says it, code, message, path and reason on stderr;
// or, for a command line that asks for --format json, the error object on stdout, a
// line each.
func printError(env Env, asJSON bool, who string, err error) {
	e := proto.AsError(err)
	if asJSON {
		proto.NewEncoder(env.Stdout).Encode(e)
		return
	}
	w := env.Stderr
	fmt.Fprintf(w, "%s: error: %s: %s\n", who, e.Code, e.Message)
	if e.Details.Path != "" {
		fmt.Fprintf(w, "  at: %s\n", e.Details.Path)
	}
	if e.Details.Reason != "" {
		fmt.Fprintf(w, "  reason: %s\n", e.Details.Reason)
	}
}
