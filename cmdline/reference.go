package cmdline

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Commands is every command of root a person runs, in the order help lists them: no
// groups, no help.
func Commands(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, c := range root.Commands() {
		switch {
		case !c.IsAvailableCommand() || c.Name() == "help":
		case c.HasAvailableSubCommands():
			out = append(out, Commands(c)...)
		default:
			out = append(out, c)
		}
	}
	return out
}

// Anchor is the markdown heading id of a command's section in the reference.
func Anchor(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "-")
}

// Table writes the markdown table of root's commands: each usage (without the program's
// name) linking to its section in page, and what it does.
func Table(w io.Writer, root *cobra.Command, page string) {
	fmt.Fprintln(w, "| command | what it does |")
	fmt.Fprintln(w, "| --- | --- |")
	for _, c := range Commands(root) {
		use := strings.TrimSuffix(strings.TrimPrefix(UseLine(c), root.Name()+" "), " [flags]")
		fmt.Fprintf(w, "| [`%s`](%s#%s) | %s |\n", cell(use), page, Anchor(c), prose(about(c)))
	}
}

// Reference writes the markdown reference of root's commands: the table, the global flags,
// then a section for each command with its usage, what it does and its flags.
func Reference(w io.Writer, root *cobra.Command) {
	fmt.Fprintf(w, "## %s\n\n%s\n\n", root.Name(), about(root))
	Table(w, root, "")
	if global := root.PersistentFlags(); global.HasAvailableFlags() {
		fmt.Fprintf(w, "\nGlobal flags, on every command they apply to (its section lists them):\n\n")
		flagTable(w, global)
	}
	for _, c := range Commands(root) {
		fmt.Fprintf(w, "\n### %s\n\n```\n%s```\n\n%s\n", c.CommandPath(), wrapTokens(useTokens(UseLine(c)), "", "    "), c.Short)
		if c.Long != "" {
			fmt.Fprintf(w, "\n%s\n", c.Long)
		}
		local := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" {
				local.AddFlag(f)
			}
		})
		if local.HasAvailableFlags() {
			fmt.Fprintln(w)
			flagTable(w, local)
		}
		if global := Globals(c); global.HasAvailableFlags() {
			var names []string
			global.VisitAll(func(f *pflag.Flag) { names = append(names, "`--"+f.Name+"`") })
			fmt.Fprintf(w, "\nGlobal flags: %s.\n", strings.Join(names, ", "))
		}
	}
}

// about is what a command does in one paragraph: its long description, else (or when
// that runs over several lines) its summary.
func about(c *cobra.Command) string {
	if c.Long != "" && !strings.Contains(strings.TrimSpace(c.Long), "\n") {
		return c.Long
	}
	return c.Short
}

// flagTable writes a markdown table of the flags of fs.
func flagTable(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprintln(w, "| flag | what |")
	fmt.Fprintln(w, "| --- | --- |")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name, usage := pflag.UnquoteUsage(f)
		if name != "" {
			name = " " + name
		}
		switch f.DefValue {
		case "", "false", "0", "[]", "0s":
		default:
			usage += fmt.Sprintf(" (default `%s`)", f.DefValue)
		}
		fmt.Fprintf(w, "| `--%s%s` | %s |\n", f.Name, name, prose(usage))
	})
}

// cell makes code fit in a markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// prose makes text fit in a markdown table cell, an angle bracket shown as one.
func prose(s string) string {
	return strings.ReplaceAll(cell(s), "<", "&lt;")
}
