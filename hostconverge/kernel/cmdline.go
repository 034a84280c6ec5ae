package kernel

import "strings"

// ProcCmdline is where the running kernel shows the command line it booted with.
const ProcCmdline = "/proc/cmdline"

// ParseCmdline splits a kernel command line into its parameters the way the kernel does:
// at spaces, tabs and newlines outside double quotes. Quotes are dropped, so
// `a="b c"` is the parameter `a=b c`.
func ParseCmdline(s string) []string {
	var params []string
	var b strings.Builder
	inQuote, inParam := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			inQuote, inParam = !inQuote, true
		case !inQuote && (c == ' ' || c == '\t' || c == '\n'):
			if inParam {
				params = append(params, b.String())
				b.Reset()
				inParam = false
			}
		default:
			b.WriteByte(c)
			inParam = true
		}
	}
	if inParam {
		params = append(params, b.String())
	}
	return params
}
