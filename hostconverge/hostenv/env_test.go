package hostenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/better-compute/better-compute/proto"
)

func TestExecRunner(t *testing.T) {
	tests := map[string]struct {
		script  string
		timeout time.Duration
		out     string
		err     string
		code    proto.Code
	}{
		"output":           {script: "echo out; echo noise >&2", out: "out\n"},
		"failure":          {script: "echo partial; echo first >&2; echo the reason >&2; exit 3", out: "partial\n", err: ": exit status 3: first; the reason", code: proto.DriverError},
		"environment":      {script: `echo "$LC_ALL $DEBIAN_FRONTEND"`, out: "C noninteractive\n"},
		"out of time":      {script: "sleep 5", timeout: 50 * time.Millisecond, err: "the unit ran out of time", code: proto.Timeout},
		"missing programs": {script: "exec /nonexistent/x", err: "exit status 127", code: proto.DriverError},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			p := NewPass(Env{Root: "/", Runner: ExecRunner{}})
			out, err := p.Run(ctx, "sh", "-c", tc.script)
			if string(out) != tc.out {
				t.Errorf("out %q, want %q", out, tc.out)
			}
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || proto.CodeOf(err) != tc.code {
				t.Errorf("error %v, want %s containing %q", err, tc.code, tc.err)
			}
		})
	}
}

func TestFiles(t *testing.T) {
	root := t.TempDir()
	p := NewPass(Env{Root: root})
	step := func(changed bool, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	step(p.EnsureFile("/etc/a/b.conf", []byte("one\n"), 0o644))
	step(p.EnsureFile("/etc/a/b.conf", []byte("one\n"), 0o644))
	step(p.EnsureFile("/etc/a/b.conf", []byte("one\n"), 0o600))
	step(p.EnsureFile("/etc/a/b.conf", []byte("two\n"), 0o600))
	step(p.RemoveFile("/etc/a/b.conf"))
	step(p.RemoveFile("/etc/a/b.conf"))
	want := []string{"wrote /etc/a/b.conf", "set the mode of /etc/a/b.conf -rw-r--r-- -> -rw-------", "rewrote /etc/a/b.conf", "removed /etc/a/b.conf"}
	if diff := cmp.Diff(want, p.Corrections()); diff != "" {
		t.Errorf("corrections (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "etc/a"))
	if len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
	err := p.WriteValue("/proc/sys/vm/nothing", "1")
	if proto.CodeOf(err) != proto.DriverError || !strings.Contains(err.Error(), "opening /proc/sys/vm/nothing: no such file or directory") || strings.Contains(err.Error(), root) {
		t.Errorf("writing a missing kernel value: %v", err)
	}
}

// answers is a Runner with fixed answers by command line.
type answers map[string]struct {
	out string
	err error
}

func (a answers) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r := a[strings.Join(append([]string{name}, args...), " ")]
	return []byte(r.out), r.err
}

func TestServiceState(t *testing.T) {
	p := NewPass(Env{Runner: answers{
		"systemctl is-enabled a": {"enabled\n", nil},
		"systemctl is-active a":  {"failed\n", errors.New("exit status 3")},
		"systemctl is-enabled b": {"", errors.New("exit status 1: Failed to connect to bus")},
	}})
	enabled, active, err := p.ServiceState(context.Background(), "a")
	if enabled != "enabled" || active != "failed" || err != nil {
		t.Errorf("a: %q %q %v", enabled, active, err)
	}
	if _, _, err := p.ServiceState(context.Background(), "b"); proto.CodeOf(err) != proto.DriverError {
		t.Errorf("b: %v, want DRIVER_ERROR", err)
	}
}
