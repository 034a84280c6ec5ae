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
	"text/tabwriter"

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

// errUsage marks a command line that is wrong; the details went to stderr.
var errUsage = errors.New("usage")

// Parse reads a command line (without the program name) with bcd's own flags: the mode
// and its flags, no positional arguments. Usage problems are written to stderr.
func Parse(args []string, stderr io.Writer) (Runner, error) {
	if len(args) == 0 {
		printHelp(stderr)
		return nil, errUsage
	}
	m, ok := Lookup(args[0])
	if !ok {
		if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
			printHelp(stderr)
			return nil, flag.ErrHelp
		}
		fmt.Fprintf(stderr, "unknown mode %q\n\n", args[0])
		printHelp(stderr)
		return nil, errUsage
	}
	fs := flag.NewFlagSet("bcd "+m.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: bcd %s %s\n\n%s\n\nflags:\n", m.Name, m.Usage, m.Summary)
		fs.PrintDefaults()
	}
	run := m.Define(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "bcd %s takes no arguments, got %q\n", m.Name, fs.Args())
		return nil, errUsage
	}
	return run, nil
}

// Run runs bcd's command line and returns the exit status: 0 done, 1 the mode failed,
// 2 the command line is wrong.
func Run(ctx context.Context, args []string, env Env) int {
	run, err := Parse(args, env.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if err := run(ctx, env); err != nil {
		for _, err := range joined(err) {
			e := proto.AsError(err)
			fmt.Fprintf(env.Stderr, "bcd %s: error: %s: %s\n", args[0], e.Code, e.Message)
			if e.Details.Path != "" {
				fmt.Fprintf(env.Stderr, "  at: %s\n", e.Details.Path)
			}
			if e.Details.Reason != "" {
				fmt.Fprintf(env.Stderr, "  reason: %s\n", e.Details.Reason)
			}
		}
		return 1
	}
	return 0
}

// joined is every error err joins (errors.Join, nested as a config's parts join their
// own), in order; err alone when it joins none.
func joined(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, joined(e)...)
	}
	return out
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "usage: bcd MODE [flags]    (MODE -h shows its flags)")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, m := range Modes() {
		fmt.Fprintf(tw, "  %s\t%s\n", m.Name, m.Summary)
	}
	tw.Flush()
}
