// Package cli is the operator's command line: `better-compute serve` and the commands
// that call the registry's API. Each command is one entry of a table (a command with its
// path, usage, summary and define, which declares its flags and turns them into one API
// call); Root builds the cobra tree from the table through cmdline. Output is a table for
// people or JSON (--format json) for scripts.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/cmdline"
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
	// Program is the command the binary was run as (bin/better-compute), for the commands
	// it suggests; empty says better-compute.
	Program string
}

// program is the command the binary was run as.
func (env Env) program() string {
	if env.Program == "" {
		return "better-compute"
	}
	return env.Program
}

// command is one leaf of the command tree, such as "profiles create".
type command struct {
	// path is the words that name the command.
	path string
	// usage shows the positional arguments and flags after the path.
	usage string
	// summary is one line for the command list.
	summary string
	// long, when set, is what the command's help and the command reference say of it in
	// place of the summary: its rules, states and defaults (code in backticks).
	long string
	// nargs is the number of positional arguments the command takes; -1 means zero
	// or one.
	nargs int
	// hostOnly: the command reaches the registry of this host through its --data-dir
	// (serve, signers), or a store through its own flags (store check, store copy), so
	// --config does not apply to it.
	hostOnly bool
	// define declares the command's flags on fs and returns what runs it.
	define func(fs *flag.FlagSet) func(x *exec) error
}

// commands is every command, in the order help lists them.
func commands() []command {
	return slices.Concat(serveCommands, storeCommands, tenantCommands, profileCommands, imageCommands, signerCommands,
		siteCommands, poolCommands, tokenCommands, secretCommands, userDataCommands, nodeCommands, eventCommands, inventoryCommands, measuredBootCommands, workflowCommands, attestationCommands)
}

// groupSummaries says what each group of commands (the first word of their paths) is for.
var groupSummaries = map[string]string{
	"tenants":     "tenants: who owns nodes, profiles, images and credentials",
	"credentials": "credentials: the bearer secrets the CLI calls the registry with",
	"profiles":    "profiles: the workflows a node runs, as versioned documents",
	"images":      "images: the OS and ramdisk images a deploy writes, by digest",
	"signers":     "image signers: the keys whose signatures verify images (host only)",
	"sites":       "sites: racks with a site agent, their BMC networks and image caches",
	"pools":       "pools: groups of nodes with one site and one policy",
	"tokens":      "join tokens: single-use tokens that admit an agent",
	"secrets":     "secrets: values node agents fetch by secret:// reference",
	"userdata":    "user data: what a cloud-init or Ignition machine boots with",
	"nodes":       "nodes: enrolment, deploys, lifecycle and inventory of machines",
	"workflows":   "workflows: the runs of profiles on nodes, step by step",
}

// globals are the flags every command that calls the registry takes.
type globals struct {
	format, config string
}

// Root is the command tree of better-compute, its commands running with env.
func Root(env Env) *cobra.Command {
	root, _ := newRoot(env)
	return root
}

func newRoot(env Env) (*cobra.Command, *globals) {
	g := &globals{}
	root := &cobra.Command{
		Use:   "better-compute",
		Short: "the registry (serve) and the operator's command line of better-compute",
		Long: "better-compute runs the registry (`better-compute serve`) and calls its API: tenants, " +
			"credentials, profiles, images, sites, pools, join tokens, secrets, nodes and workflows. " +
			"A command prints a table, or JSON with --format json; it exits 0 when done, 1 when the " +
			"call failed and 2 when the command line is wrong.",
	}
	root.PersistentFlags().StringVar(&g.config, "config", "", "the CLI config `FILE` (default $BC_CONFIG; serve writes DATA_DIR/admin.conf)")
	root.PersistentFlags().StringVar(&g.format, "format", "table", "output `FORMAT`, table or json")
	root.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
	groups := map[string]*cobra.Command{}
	for _, cmd := range commands() {
		words := strings.Fields(cmd.path)
		parent := root
		for i, w := range words[:len(words)-1] {
			key := strings.Join(words[:i+1], " ")
			if groups[key] == nil {
				groups[key] = cmdline.Group(w, groupSummaries[key])
				parent.AddCommand(groups[key])
			}
			parent = groups[key]
		}
		parent.AddCommand(leaf(cmd, env, g))
	}
	cmdline.Setup(root)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	return root, g
}

// leaf is the cobra command of one table entry.
func leaf(cmd command, env Env, g *globals) *cobra.Command {
	words := strings.Fields(cmd.path)
	c := &cobra.Command{
		Use:   strings.TrimSpace(words[len(words)-1] + " " + cmd.usage),
		Short: cmd.summary,
		Long:  cmd.long,
		Args:  cmdline.Args(cmd.nargs, argNames(cmd.usage)),
	}
	if cmd.hostOnly {
		cmdline.Applies(c, "format")
	}
	run := cmd.define(c.Flags())
	cmdline.RequireMarked(c.Flags())
	c.RunE = func(c *cobra.Command, args []string) error {
		if g.format != "table" && g.format != "json" {
			return cmdline.Usagef("--format", "--format must be table or json, not %q", g.format)
		}
		return run(&exec{ctx: c.Context(), env: env, args: args, format: g.format, configPath: g.config})
	}
	return c
}

// argNames is the positional arguments a usage line starts with, such as NAME or ID|REF.
func argNames(usage string) string {
	var names []string
	for _, w := range strings.Fields(usage) {
		if strings.ContainsAny(w[:1], "-[(|") {
			break
		}
		names = append(names, w)
	}
	return strings.Join(names, " ")
}

// Run runs the command line args (without the program name) and returns the exit
// status: 0 done, 1 the call failed, 2 the command line is wrong.
func Run(ctx context.Context, args []string, env Env) int {
	root, g := newRoot(env)
	c, err := cmdline.Execute(ctx, root, args)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errReported):
		return 1
	case cmdline.Shown(err):
		return 2
	}
	format := g.format
	if cmdline.JSONAsked(args) {
		format = "json" // a usage error may come before --format is parsed
	}
	printError(env, format, err)
	if cmdline.IsUsage(err) {
		if format != "json" {
			fmt.Fprintln(env.Stderr, cmdline.HelpHint(c))
		}
		return 2
	}
	return 1
}

// streamError is the error of a command that prints JSON lines (nodes events --follow
// --format json): printError writes it on one line too, so a reader of lines reads it.
type streamError struct{ error }

func (e streamError) Unwrap() error { return e.error }

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

// config reads the CLI config: --config, else $BC_CONFIG.
func (x *exec) config() (api.ClientConfig, error) {
	path := x.configPath
	if path == "" {
		path = x.env.Getenv("BC_CONFIG")
	}
	if path == "" {
		return api.ClientConfig{}, proto.Errorf(proto.InvalidConfig, "no CLI config: pass --config FILE or set BC_CONFIG (`serve` writes DATA_DIR/admin.conf)")
	}
	return api.LoadClientConfig(path) // refuses a file others may use: it holds a credential
}

// client makes the API client from the CLI config.
func (x *exec) client() (*api.Client, error) {
	cfg, err := x.config()
	if err != nil {
		return nil, err
	}
	return x.clientOf(cfg)
}

// clientOf makes the API client of cfg, logging to stderr when it waits to send a call
// the registry refused for now again.
func (x *exec) clientOf(cfg api.ClientConfig) (*api.Client, error) {
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	c.LogTo(slog.New(slog.NewTextHandler(x.env.Stderr, nil)))
	return c, nil
}

// call makes one API call with the configured client.
func (x *exec) call(method string, req, resp any) error {
	c, err := x.client()
	if err != nil {
		return err
	}
	if err := c.Call(x.ctx, method, req, resp); err != nil {
		return x.interrupted(method, err)
	}
	return nil
}

// interrupted is the error of a call that ended with err: when the command was
// interrupted (Ctrl-C) it is not that the registry could not be reached, as the client
// says of a request it cut off, but that the answer was not waited for, and a call that
// changes something may have been carried out: the error says to look before running it
// again. Any other err (nil too) is itself.
func (x *exec) interrupted(method string, err error) error {
	if err == nil || x.ctx.Err() == nil {
		return err
	}
	return proto.Errorf(proto.Unavailable, "interrupted (%v) before the registry answered %s: a call that changes something may have been carried out; "+
		"look (the command's list or get) before running it again", context.Cause(x.ctx), method)
}

// print writes v as JSON, or as the table that table writes.
func (x *exec) print(v any, table func(t *tabwriter.Writer)) {
	if x.format == "json" {
		enc := proto.NewEncoder(x.env.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(v)
		return
	}
	tw := tabwriter.NewWriter(textWriter{x.env.Stdout}, 0, 8, 2, ' ', 0)
	table(tw)
	tw.Flush()
}

// printError reports a failure: the error object on stdout with --format json (on one
// line for a command that prints JSON lines: streamError), else code, message, path and
// reason on stderr. A call the registry refused for now, which the CLI gave up sending
// again, also says the seconds its last answer asked to wait (retryAfterSeconds), so a
// script knows when to try.
func printError(env Env, format string, err error) {
	e := proto.AsError(err)
	var retryAfter *int
	if seconds := api.RetryAfter(err); seconds >= 0 {
		retryAfter = &seconds
	}
	if format == "json" {
		enc := proto.NewEncoder(env.Stdout)
		if _, ok := errors.AsType[streamError](err); !ok {
			enc.SetIndent("", "  ")
		}
		enc.Encode(struct {
			*proto.Error
			RetryAfterSeconds *int `json:"retryAfterSeconds,omitempty"`
		}{e, retryAfter})
		return
	}
	w := textWriter{env.Stderr}
	fmt.Fprintf(w, "error: %s: %s\n", e.Code, e.Message)
	if e.Details.Path != "" {
		fmt.Fprintf(w, "  path: %s\n", e.Details.Path)
	}
	if e.Details.Reason != "" {
		fmt.Fprintf(w, "  reason: %s\n", e.Details.Reason)
	}
	if retryAfter != nil {
		fmt.Fprintf(w, "  retry after: %ds\n", *retryAfter)
	}
}

// readFile reads an input file named on the command line, as INVALID_INPUT when it
// cannot be read.
func readFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	var pe *fs.PathError
	switch {
	case errors.Is(err, syscall.EISDIR):
		return nil, proto.Errorf(proto.InvalidInput, "%s is a directory: name the file itself", path)
	case errors.As(err, &pe):
		return nil, proto.Errorf(proto.InvalidInput, "read %s: %v", path, pe.Err)
	case err != nil:
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
