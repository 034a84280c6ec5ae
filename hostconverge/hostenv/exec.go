package hostenv

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// ExecRunner runs programs on this host, as children of bcd, with a fixed environment:
// a system PATH, the C locale (so programs print what the parsers expect) and no
// interactive prompts from Debian's package tools. It is the runner for Root "/".
type ExecRunner struct{}

// execEnv is the environment of every program ExecRunner runs.
var execEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LC_ALL=C",
	"DEBIAN_FRONTEND=noninteractive",
}

// Run runs name with args and returns its standard output, of which more than
// maxOutput is kept as its head and tail (clipped); an error carries the end of its
// standard error (errorText). The program and its process group are killed when ctx ends.
func (ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = execEnv
	// The program leads its own process group, so that running out of time kills what
	// it started too (a package script, a shell's children).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr clipped
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if text := errorText(string(stderr.Bytes())); text != "" {
			return stdout.Bytes(), fmt.Errorf("%w: %s", err, text)
		}
		return stdout.Bytes(), err
	}
	return stdout.Bytes(), nil
}

// maxOutput bounds what is kept of one output of a program: the queries bcd parses
// print a few KiB, apt-get installing a driver a few hundred; a program (or a package's
// maintainer script) printing without end must not make bcd grow with it.
const maxOutput = 1 << 20

// clipped keeps the first and the last maxOutput/2 bytes written to it, and counts
// those dropped between them. It has no ReadFrom: io.Copy, which os/exec writes a
// program's output with, would read past Write.
type clipped struct {
	head, tail []byte
	next       int   // where the next byte goes in tail, once tail is full
	cut        int64 // bytes dropped between head and tail
}

func (c *clipped) Write(p []byte) (int, error) {
	n, half := len(p), maxOutput/2
	if room := half - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head, p = append(c.head, p[:k]...), p[k:]
	}
	for len(p) > 0 {
		if len(c.tail) < half {
			k := min(half-len(c.tail), len(p))
			c.tail, p = append(c.tail, p[:k]...), p[k:]
			continue
		}
		k := copy(c.tail[c.next:], p)
		c.next, c.cut, p = (c.next+k)%half, c.cut+int64(k), p[k:]
	}
	return n, nil
}

// Bytes is what was kept: the head, a note of how much was cut when anything was, and
// the tail.
func (c *clipped) Bytes() []byte {
	out := slices.Clip(c.head)
	if c.cut > 0 {
		out = fmt.Appendf(out, "\n… (%d bytes cut) …\n", c.cut)
	}
	return append(append(out, c.tail[c.next:]...), c.tail[:c.next]...)
}

// maxErrorText bounds what of a failed program's standard error its error carries: a
// failure's error and the lines that explain it (kubeadm's preflight errors, one a line)
// fit in it, and a unit's message, which the node's report and bcd's log carry, stays
// small whatever the program printed. errorWindow is the end of standard error read for
// it, so that blank lines without end are not read back to the cut of a clipped output.
const (
	maxErrorText = 2 << 10
	errorWindow  = 4 * maxErrorText
)

// stackTraceHint is the line kubeadm prints after the error of every failure; it says
// nothing of the failure, so an error leaves it out.
const stackTraceHint = "To see the stack trace of this error execute with --v=5 or higher"

// errorText is what a failed program's error carries of its standard error: its last
// whole lines, trimmed, blank ones and stackTraceHint left out, joined by "; ", as many as
// fit in maxErrorText, after "…" when anything before them was left out. A last line
// longer than that keeps the words that fit, and " …". No word is kept in part: a secret
// the program printed (a configuration it echoed) is whole, where the caller's redaction
// finds it, or not there at all.
func errorText(stderr string) string {
	cut := false
	if len(stderr) > errorWindow {
		window := stderr[len(stderr)-errorWindow:]
		_, stderr, _ = strings.Cut(window, "\n")
		cut = true
	}
	lines := strings.Split(stderr, "\n")
	var kept []string
	size := 0
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(lines[i])
		if line == "" || line == stackTraceHint {
			continue
		}
		if size+len(line) <= maxErrorText {
			kept, size = append(kept, line), size+len(line)+len("; ")
			continue
		}
		if len(kept) > 0 {
			cut = true
		} else if j := strings.LastIndexAny(line[:maxErrorText+1], " \t"); j > 0 {
			kept = append(kept, strings.TrimSpace(line[:j])+" …")
			cut = cut || strings.TrimSpace(strings.Join(lines[:i], "")) != ""
		} else {
			cut = true
		}
		break
	}
	if cut {
		kept = append(kept, "…")
	}
	slices.Reverse(kept)
	return strings.Join(kept, "; ")
}
