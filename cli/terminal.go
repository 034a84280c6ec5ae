package cli

import (
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether r is a terminal: a file whose terminal attributes read.
func isTerminal(r io.Reader) bool {
	f, ok := r.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// textWriter is w for what a command prints for people (its tables, a workflow's lines,
// its error): every control character but the tab and the newline its lines are made of
// is written escaped, as \x1b or \u009b, and every byte that is not UTF-8 as \xNN. The
// texts printed come from tenants and agents (an agent's error, a host unit's message, a
// GPU's name), so none of them may move the cursor, retitle the window or set the
// clipboard of the operator's terminal. JSON escapes them already.
type textWriter struct{ w io.Writer }

func (t textWriter) Write(p []byte) (int, error) {
	clean := true
	for _, b := range p {
		if b < 0x20 && b != '\t' && b != '\n' || b >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return t.w.Write(p)
	}
	if _, err := t.w.Write(escapeControls(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// escapeControls is p with its control characters, but tab and newline, and its bytes
// that are not UTF-8 escaped.
func escapeControls(p []byte) []byte {
	out := make([]byte, 0, len(p)+16)
	for len(p) > 0 {
		r, size := utf8.DecodeRune(p)
		switch {
		case r == utf8.RuneError && size <= 1:
			out = fmt.Appendf(out, `\x%02x`, p[0])
		case r == '\t' || r == '\n' || !unicode.IsControl(r):
			out = append(out, p[:size]...)
		case r < utf8.RuneSelf:
			out = fmt.Appendf(out, `\x%02x`, r)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		p = p[size:]
	}
	return out
}
