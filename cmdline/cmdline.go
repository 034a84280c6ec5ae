// Package cmdline is the shape both of the project's command lines share (better-compute's
// and bcd's), on cobra: help for every command that fits 100 columns, `help CMD` and
// `CMD --help`, suggestions for a mistyped command, usage errors that name the flag or
// argument at fault and exit 2, integer flags read in decimal digits alone, global flags
// only where they apply, required flags, shell completion, and the generated command
// reference and man pages.
package cmdline

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/better-compute/better-compute/proto"
)

// Width is the column every line of help fits in.
const Width = 100

// usageError is a command line that is wrong: the command exits 2.
type usageError struct {
	err *proto.Error
	// shown: the help that says what is wrong is printed already.
	shown bool
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// Usagef is a usage error: INVALID_INPUT at path (the flag, as --site, or the argument,
// as NAME, at fault).
func Usagef(path, format string, args ...any) error {
	return &usageError{err: proto.Errorf(proto.InvalidInput, format, args...).WithPath(path)}
}

// IsUsage reports whether err is a usage error (exit 2).
func IsUsage(err error) bool {
	var u *usageError
	return errors.As(err, &u)
}

// Shown reports whether err is a usage error whose help is printed already (no
// arguments at all): there is nothing more to say.
func Shown(err error) bool {
	var u *usageError
	return errors.As(err, &u) && u.shown
}

// Annotation keys on commands and flags.
const (
	// globalsKey lists, comma-separated, the inherited flags that apply to a command.
	globalsKey = "cmdline.globals"
	// groupKey marks a command that only holds others: its help lists their commands.
	groupKey = "cmdline.group"
	// requiredKey marks a required flag; cobra's own key, so completion offers it first.
	requiredKey = cobra.BashCompOneRequiredFlag
)

// Group makes a command that only holds others, such as `profiles`: run alone it prints
// its help (exit 2), and a word after it that names none of its commands is a usage
// error with suggestions.
func Group(name, short string) *cobra.Command {
	return &cobra.Command{Use: name, Short: short, Annotations: map[string]string{groupKey: "true"},
		Args: subcommandArgs, RunE: helpAndFail}
}

// Applies declares which inherited (global) flags apply to cmd and its commands: only
// those are listed in its help and accepted on its command line. A command that does
// not declare it takes them all.
func Applies(cmd *cobra.Command, names ...string) {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[globalsKey] = strings.Join(names, ",")
}

// applies reports whether the inherited flag name applies to cmd: the nearest command,
// from cmd up, that declares its globals decides.
func applies(cmd *cobra.Command, name string) bool {
	for c := cmd; c != nil; c = c.Parent() {
		if list, ok := c.Annotations[globalsKey]; ok {
			return slices.Contains(strings.Split(list, ","), name)
		}
	}
	return true
}

// Require marks flags of fs as required: a command line without one, or with a string
// one given empty, is a usage error naming it, before the command runs.
func Require(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		if err := fs.SetAnnotation(n, requiredKey, []string{"true"}); err != nil {
			panic(err) // a flag the command does not declare: a bug of its definition
		}
	}
}

// RequireMarked marks as required every flag of fs whose usage ends "(required)": its
// help says so, and a command line without it is wrong.
func RequireMarked(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if strings.HasSuffix(f.Usage, "(required)") {
			Require(fs, f.Name)
		}
	})
}

// UsageOf is err, a refusal of a flag's or an argument's value at its path (as a check
// of a command's options makes it), as a usage error there: INVALID_INPUT, exit 2.
func UsageOf(err error) error {
	e := proto.AsError(err)
	return Usagef(e.Details.Path, "%s", e.Message)
}

// Args checks a command's positional arguments: exactly n, or 0 or 1 when n is -1. names
// says them for the message (as the usage line does, NAME or ID|REF).
func Args(n int, names string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		switch {
		case n == -1 && len(args) > 1:
			return Usagef(names, "%s takes at most one argument (%s), got %d: %q", c.CommandPath(), names, len(args), args)
		case n == 0 && len(args) > 0:
			return Usagef(args[0], "%s takes no arguments, got %q", c.CommandPath(), args)
		case n > 0 && len(args) < n:
			return Usagef(names, "%s needs %s", c.CommandPath(), names)
		case n > 0 && len(args) > n:
			return Usagef(names, "%s takes %s, got %d arguments: %q", c.CommandPath(), names, len(args), args)
		}
		return nil
	}
}

// Setup makes root and every command under it behave the one way: help and usage, usage
// errors, suggestions, `help CMD`, shell completion, and the global-flag and
// required-flag checks. Call it once the tree is whole.
func Setup(root *cobra.Command) {
	cobra.EnableCommandSorting = false // help lists commands in the order the tree has them
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetFlagErrorFunc(flagError)
	root.SetHelpFunc(func(c *cobra.Command, _ []string) { fmt.Fprint(c.OutOrStdout(), helpText(c)) })
	root.SetUsageFunc(func(c *cobra.Command) error { _, err := fmt.Fprint(c.OutOrStderr(), usageText(c)); return err })
	root.SetHelpCommand(helpCommand())
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.PersistentPreRunE = checkFlags
	if root.Args == nil {
		root.Args = subcommandArgs
	}
	if root.RunE == nil && root.Run == nil {
		root.RunE = helpAndFail
	}
	walk(root, func(c *cobra.Command) { c.SuggestionsMinimumDistance = 2 })
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			Applies(c)
			c.Short = "print the script that completes " + root.Name() + "'s commands and flags in bash, zsh, fish or powershell"
			c.Args, c.RunE = subcommandArgs, helpAndFail
			for _, shell := range c.Commands() {
				shell.Args = Args(0, "")
			}
		}
	}
}

// walk calls f on c and every command under it.
func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}

// Execute runs root with args (without the program name) and returns the command that
// ran, or the nearest one found, and its error.
func Execute(ctx context.Context, root *cobra.Command, args []string) (*cobra.Command, error) {
	if args == nil {
		args = []string{}
	}
	root.SetArgs(args)
	return root.ExecuteContextC(ctx)
}

// HelpHint is the line that follows a usage error of c: where its usage is.
func HelpHint(c *cobra.Command) string {
	if c.Name() == "help" && c.HasParent() {
		c = c.Parent() // help's own usage is not what was asked for
	}
	return fmt.Sprintf("run `%s --help` for its usage", c.CommandPath())
}

// helpAndFail prints the help of a command that needs a command after it, and fails as a
// usage error already shown.
func helpAndFail(c *cobra.Command, _ []string) error {
	fmt.Fprint(c.ErrOrStderr(), helpText(c))
	return &usageError{err: proto.Errorf(proto.InvalidInput, "%s needs a command", c.CommandPath()), shown: true}
}

// subcommandArgs refuses a word after a group that names none of its commands, with the
// commands it may have meant.
func subcommandArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %s?", quoteJoin(s))
	}
	return Usagef(args[0], "%s", msg)
}

// quoteJoin is "a", "b" or "c".
func quoteJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = fmt.Sprintf("%q", w)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// flagName finds the flag a parse error is about.
var flagName = regexp.MustCompile(`--[a-z0-9][a-z0-9-]*|'[a-zA-Z]' in -[a-zA-Z]+`)

// flagError turns a flag parse error into a usage error at the flag, with the flag the
// command line may have meant when it names none of the command's.
func flagError(c *cobra.Command, err error) error {
	path := flagName.FindString(err.Error())
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		if s := similarFlags(c, name); len(s) > 0 {
			msg += fmt.Sprintf("; did you mean %s?", quoteJoin(s))
		}
	}
	return Usagef(path, "%s", msg)
}

// similarFlags is the flags of c a mistyped name may have meant: one or two edits away,
// or starting with it.
func similarFlags(c *cobra.Command, typed string) []string {
	var out []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || c.InheritedFlags().Lookup(f.Name) != nil && !applies(c, f.Name) {
			return
		}
		if strings.HasPrefix(f.Name, typed) || levenshtein(typed, f.Name) <= 2 {
			out = append(out, "--"+f.Name)
		}
	})
	return out
}

// levenshtein is the edit distance of a and b.
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// checkFlags refuses an inherited flag that does not apply to the command, and a missing
// required flag or a required string flag given empty, before the command runs.
func checkFlags(c *cobra.Command, _ []string) error {
	var err error
	c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if err == nil && f.Changed && !applies(c, f.Name) {
			err = Usagef("--"+f.Name, "--%s does not apply to %s", f.Name, c.CommandPath())
		}
	})
	if err != nil {
		return err
	}
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if err != nil || len(f.Annotations[requiredKey]) == 0 {
			return
		}
		_, usage := pflag.UnquoteUsage(f)
		usage = strings.TrimSuffix(usage, " (required)")
		switch {
		case !f.Changed:
			err = Usagef("--"+f.Name, "%s needs --%s: %s", c.CommandPath(), f.Name, usage)
		case f.Value.Type() == "string" && f.Value.String() == "":
			// A script's unset variable (--profile "$P"): the flag is there, its value is not.
			err = Usagef("--"+f.Name, "%s needs a value of --%s, not an empty one: %s", c.CommandPath(), f.Name, usage)
		}
	})
	return err
}

// helpCommand is `help [COMMAND...]`: the help of a command, exit 0; a command that does
// not exist is a usage error with suggestions.
func helpCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "help [COMMAND...]",
		Short: "show the help of a command",
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			target, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, sub := range target.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					out = append(out, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := c.Root().Find(args)
			if err == nil && len(rest) > 0 && target.Args != nil {
				err = target.Args(target, rest)
			}
			if err != nil {
				return err
			}
			target.InitDefaultHelpFlag() // listed among its flags, as with --help
			fmt.Fprint(c.OutOrStdout(), helpText(target))
			return nil
		},
	}
	Applies(c)
	return c
}

// JSONAsked reports whether the command line asks for --format json: a usage error may
// come before the flag is parsed, and is then written as JSON too.
func JSONAsked(args []string) bool {
	for i, a := range args {
		if a == "--" {
			return false
		}
		if a == "--format=json" || a == "--format" && i+1 < len(args) && args[i+1] == "json" {
			return true
		}
	}
	return false
}
