// Package cli is the operator's command line: `better-compute serve` and the commands
// that call the registry's API. Each command declares its flags and turns them into one
// API call; output is a table for people or JSON (--format json) for scripts.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

// Env is what a command runs with; tests give their own writers and environment.
type Env struct {
	// Stdin is read by the commands that take a value from standard input (secrets put
	// --file -); nil reads nothing.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// command is one leaf of the command tree, such as "profiles create".
type command struct {
	// path is the words that name the command.
	path string
	// usage shows the positional arguments and flags after the path.
	usage string
	// summary is one line for the command list.
	summary string
	// nargs is the number of positional arguments the command takes; -1 means zero
	// or one.
	nargs int
	// define declares the command's flags on fs and returns what runs it.
	define func(fs *flag.FlagSet) func(x *exec) error
}

// commands is every command, in the order help lists them.
func commands() []command {
	return slices.Concat(serveCommands, tenantCommands, profileCommands, imageCommands, signerCommands,
		siteCommands, poolCommands, tokenCommands, secretCommands, userDataCommands, nodeCommands, inventoryCommands, measuredBootCommands, workflowCommands, attestationCommands)
}

// Run runs the command line args (without the program name) and returns the exit
// status: 0 done, 1 the call failed, 2 the command line is wrong.
func Run(ctx context.Context, args []string, env Env) int {
	cmds := commands()
	cmd, rest := find(cmds, args)
	if cmd == nil {
		printHelp(env.Stderr, cmds, args)
		if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
			return 0
		}
		return 2
	}
	fs := flag.NewFlagSet("better-compute "+cmd.path, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	x := &exec{ctx: ctx, env: env}
	fs.StringVar(&x.format, "format", "table", "output format: table or json")
	fs.StringVar(&x.configPath, "config", "", "CLI config file (default $BC_CONFIG)")
	runner := cmd.define(fs)
	fs.Usage = func() {
		fmt.Fprintf(env.Stderr, "usage: better-compute %s %s\n\n%s\n\nflags:\n", cmd.path, cmd.usage, cmd.summary)
		fs.PrintDefaults()
	}
	positional, err := parseInterleaved(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if x.format != "table" && x.format != "json" {
		fmt.Fprintf(env.Stderr, "--format must be table or json, not %q\n", x.format)
		return 2
	}
	if len(positional) != cmd.nargs && !(cmd.nargs == -1 && len(positional) <= 1) {
		want := fmt.Sprint(cmd.nargs)
		if cmd.nargs == -1 {
			want = "at most 1"
		}
		fmt.Fprintf(env.Stderr, "better-compute %s takes %s argument(s), got %d\n", cmd.path, want, len(positional))
		fs.Usage()
		return 2
	}
	x.args = positional
	if err := runner(x); err != nil {
		if !errors.Is(err, errReported) {
			x.printError(err)
		}
		return 1
	}
	return 0
}

// find picks the command whose path is the longest prefix of args.
func find(cmds []command, args []string) (*command, []string) {
	var best *command
	var rest []string
	for i := range cmds {
		words := strings.Fields(cmds[i].path)
		if len(args) >= len(words) && slices.Equal(args[:len(words)], words) {
			if best == nil || len(words) > len(strings.Fields(best.path)) {
				best, rest = &cmds[i], args[len(words):]
			}
		}
	}
	return best, rest
}

// parseInterleaved parses flags that may come before, between or after positional
// arguments, as in `profiles create FILE --tenant T`.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func printHelp(w io.Writer, cmds []command, args []string) {
	prefix := strings.Join(args, " ")
	if prefix == "help" || strings.HasPrefix(prefix, "-") {
		prefix = ""
	}
	var matched []command
	for _, c := range cmds {
		if strings.HasPrefix(c.path, prefix) {
			matched = append(matched, c)
		}
	}
	if len(matched) == 0 {
		fmt.Fprintf(w, "unknown command %q\n\n", prefix)
		matched = cmds
	}
	fmt.Fprintln(w, "usage: better-compute COMMAND [flags]    (COMMAND -h shows its flags)")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, c := range matched {
		fmt.Fprintf(tw, "  %s %s\t%s\n", c.path, c.usage, c.summary)
	}
	tw.Flush()
}

// errReported fails a command whose output already says why (profiles validate with
// problems): it exits 1 without another message.
var errReported = errors.New("reported")

// exec is one run of a command: its arguments, output format and registry client.
type exec struct {
	ctx        context.Context
	env        Env
	args       []string
	format     string
	configPath string
}

// configFile is the CLI config's path: --config, else $BC_CONFIG.
func (x *exec) configFile() string {
	if x.configPath != "" {
		return x.configPath
	}
	return x.env.Getenv("BC_CONFIG")
}

// client makes the API client from the CLI config.
func (x *exec) client() (*api.Client, error) {
	path := x.configFile()
	if path == "" {
		return nil, proto.Errorf(proto.InvalidConfig, "no CLI config: pass --config FILE or set BC_CONFIG (`serve` writes DATA_DIR/admin.conf)")
	}
	cfg, err := api.LoadClientConfig(path)
	if err != nil {
		return nil, err
	}
	return api.NewClient(cfg)
}

// call makes one API call with the configured client.
func (x *exec) call(method string, req, resp any) error {
	c, err := x.client()
	if err != nil {
		return err
	}
	return c.Call(x.ctx, method, req, resp)
}

// print writes v as JSON, or as the table that table writes.
func (x *exec) print(v any, table func(t *tabwriter.Writer)) {
	if x.format == "json" {
		enc := json.NewEncoder(x.env.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(v)
		return
	}
	tw := tabwriter.NewWriter(x.env.Stdout, 0, 8, 2, ' ', 0)
	table(tw)
	tw.Flush()
}

// printError reports a failure: the error object on stdout with --format json, else
// code, message, path and reason on stderr.
func (x *exec) printError(err error) {
	e := proto.AsError(err)
	if x.format == "json" {
		enc := json.NewEncoder(x.env.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(e)
		return
	}
	fmt.Fprintf(x.env.Stderr, "error: %s: %s\n", e.Code, e.Message)
	if e.Details.Path != "" {
		fmt.Fprintf(x.env.Stderr, "  path: %s\n", e.Details.Path)
	}
	if e.Details.Reason != "" {
		fmt.Fprintf(x.env.Stderr, "  reason: %s\n", e.Details.Reason)
	}
}

// readFile reads an input file named on the command line, as INVALID_INPUT when it
// cannot be read.
func readFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, proto.Errorf(proto.InvalidInput, "read %s: %v", path, err)
	}
	return data, nil
}

// csv splits a comma-separated flag value, dropping empty items.
func csv(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// checkNewFile refuses, before anything is made, a path a secret cannot be written to
// as a new file: one that exists (it may hold the only copy of another credential, such
// as admin.conf), or whose directory does not exist. The error is INVALID_INPUT at flag
// and says what to do; nothing was made on the registry.
func checkNewFile(path, flag string) error {
	if _, err := os.Lstat(path); err == nil {
		return proto.Errorf(proto.InvalidInput, "%s exists, and it may hold another credential: name a new file, or move that one away first; nothing was made", path).WithPath(flag)
	}
	dir := filepath.Dir(path)
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return proto.Errorf(proto.InvalidInput, "%s: the directory %s does not exist: make it first (mkdir -p %s); nothing was made", path, dir, dir).WithPath(flag)
	}
	return nil
}
