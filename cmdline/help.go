package cmdline

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// helpText is a command's help: what it does, then its usage.
func helpText(c *cobra.Command) string {
	about := c.Short
	if c.Long != "" && about != "" {
		about += "\n\n" + c.Long
	} else if c.Long != "" {
		about = c.Long
	}
	var b strings.Builder
	if about != "" {
		b.WriteString(Wrap(about, "", ""))
		b.WriteString("\n")
	}
	b.WriteString(usageText(c))
	return b.String()
}

// usageText is a command's usage line (or the commands under it), its flags and the
// global flags that apply to it, each line at most Width columns.
func usageText(c *cobra.Command) string {
	var b strings.Builder
	b.WriteString("Usage:\n")
	container := c.HasAvailableSubCommands()
	if container {
		fmt.Fprintf(&b, "  %s COMMAND [flags]\n", c.CommandPath())
	} else {
		b.WriteString(wrapTokens(useTokens(UseLine(c)), "  ", "      "))
	}
	if container {
		b.WriteString("\nCommands:\n")
		rows := commandRows(c, "")
		width := 0
		for _, r := range rows {
			width = max(width, len(r[0]))
		}
		width = min(width, 24)
		for _, r := range rows {
			if len(r[0]) > width {
				fmt.Fprintf(&b, "  %s\n", r[0])
				b.WriteString(Wrap(r[1], strings.Repeat(" ", width+4), strings.Repeat(" ", width+4)))
				continue
			}
			b.WriteString(Wrap(r[1], fmt.Sprintf("  %-*s  ", width, r[0]), strings.Repeat(" ", width+4)))
		}
	}
	if local := c.LocalFlags(); local.HasAvailableFlags() {
		b.WriteString("\nFlags:\n")
		b.WriteString(local.FlagUsagesWrapped(Width))
	}
	if global := Globals(c); global.HasAvailableFlags() {
		b.WriteString("\nGlobal flags:\n")
		b.WriteString(global.FlagUsagesWrapped(Width))
	}
	if container {
		fmt.Fprintf(&b, "\nRun `%s COMMAND --help` for the flags of a command.\n", c.CommandPath())
	}
	return b.String()
}

// UseLine is the command's path with its usage: the arguments and flags it takes.
func UseLine(c *cobra.Command) string {
	line := c.UseLine()
	if !c.HasAvailableFlags() {
		line = strings.TrimSuffix(line, " [flags]")
	}
	return line
}

// commandRows lists the commands under c, with their one-line summaries; the commands of
// a group under c are listed by their path below c (`profiles create`).
func commandRows(c *cobra.Command, prefix string) [][2]string {
	var rows [][2]string
	for _, sub := range c.Commands() {
		isHelp := sub.Name() == "help" && c == c.Root()
		if !sub.IsAvailableCommand() && !isHelp {
			continue
		}
		if sub.Annotations[groupKey] != "" {
			rows = append(rows, commandRows(sub, prefix+sub.Name()+" ")...)
			continue
		}
		rows = append(rows, [2]string{prefix + sub.Name(), sub.Short})
	}
	return rows
}

// Globals is the inherited flags that apply to c.
func Globals(c *cobra.Command) *pflag.FlagSet {
	fs := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if applies(c, f.Name) {
			fs.AddFlag(f)
		}
	})
	return fs
}

// Wrap breaks text into lines of at most Width columns at spaces, each paragraph (a line
// of text) on its own: the first line starts with first, the others with rest. A word
// longer than a line stays whole.
func Wrap(text, first, rest string) string {
	var b strings.Builder
	for _, para := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		b.WriteString(wrapTokens(strings.Fields(para), first, rest))
		first = rest
	}
	return b.String()
}

// useTokens splits a usage line into words, keeping each bracketed group ([--tenant T],
// (--file F | --visibility V)) and each flag with its value (--site S) whole, so a line
// never breaks inside one.
func useTokens(line string) []string {
	var out []string
	depth := 0
	for _, w := range strings.Fields(line) {
		n := len(out)
		if depth > 0 || n > 0 && strings.HasPrefix(out[n-1], "--") && !strings.Contains(out[n-1], " ") && !strings.ContainsAny(w[:1], "-[(|") {
			out[n-1] += " " + w
		} else {
			out = append(out, w)
		}
		depth += strings.Count(w, "[") + strings.Count(w, "(") - strings.Count(w, "]") - strings.Count(w, ")")
		depth = max(depth, 0)
	}
	return out
}

// wrapTokens lays tokens out on lines of at most Width columns, joined by spaces: the
// first line starts with first, the others with rest.
func wrapTokens(tokens []string, first, rest string) string {
	var b strings.Builder
	line, empty := first, true
	for _, tok := range tokens {
		if !empty && len(line)+1+len(tok) > Width {
			b.WriteString(line + "\n")
			line, empty = rest, true
		}
		if !empty {
			line += " "
		}
		line += tok
		empty = false
	}
	b.WriteString(strings.TrimRight(line, " ") + "\n")
	return b.String()
}
