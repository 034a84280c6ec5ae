package hostenv

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
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

// Run runs name with args and returns its standard output; an error carries the last
// line of its standard error. The program and its process group are killed when ctx
// ends.
func (ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = execEnv
	// The program leads its own process group, so that running out of time kills what
	// it started too (a package script, a shell's children).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if last := lastLine(stderr.String()); last != "" {
			return stdout.Bytes(), fmt.Errorf("%w: %s", err, last)
		}
		return stdout.Bytes(), err
	}
	return stdout.Bytes(), nil
}

// lastLine returns the last non-blank line of s, at most 512 bytes of it.
func lastLine(s string) string {
	s = strings.TrimRight(s, " \t\r\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	return strings.TrimSpace(s)
}
