// Package crashpoint stages a crash at an exact moment: it runs one test of the test
// binary (re-executed, as a child) under strace, and kills it with SIGKILL as it enters
// a chosen call of a chosen system call, so the test sees what a kill at that moment
// leaves on disk and what the next start makes of it; or it records the calls the child
// makes, with the paths of their file descriptors, so a test sees in what order a write
// reaches the disk (what a power loss keeps). Only tests import it.
package crashpoint

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// argEnv carries the parent's argument to the child.
const argEnv = "BC_CRASHPOINT_ARG"

// Writes are the system calls that change what a file or a directory holds, or make it
// durable: the moments a crash between them tells apart.
var Writes = []string{"write", "pwrite64", "ftruncate", "fsync", "fdatasync", "rename", "renameat", "renameat2", "link", "linkat", "unlink", "unlinkat", "fchmod", "fchmodat", "chmod"}

// Child returns the argument the parent gave the child, and locks the calling goroutine
// to its thread: strace counts calls per thread, so the test's calls are counted on one.
// In a process that is no child it skips t.
func Child(t testing.TB) string {
	t.Helper()
	arg, ok := os.LookupEnv(argEnv)
	if !ok {
		t.Skip("a crashpoint child: run by its parent test")
	}
	runtime.LockOSThread()
	return arg
}

// KillAt runs test (the name of a test of this binary, which calls Child) with arg under
// strace, and kills it with SIGKILL as it enters its nth call (from 1) of call. It
// reports whether the child was killed: false means it made fewer such calls, and ran to
// its end and passed.
func KillAt(t testing.TB, test, arg, call string, n int) bool {
	t.Helper()
	out, err := run(t, test, arg, "-o", os.DevNull, "-e", "trace="+call, "-e", fmt.Sprintf("inject=%s:signal=KILL:when=%d", call, n))
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true
		}
	}
	if err != nil {
		t.Fatalf("%s (killed at %s #%d): %v\n%s", test, call, n, err, out)
	}
	return false
}

// EachKill kills test at every call of Writes it makes, one run each, in the order of
// Writes and of the calls. Before each run fresh makes what the child starts from and
// returns its argument; after each kill after looks at what the kill left, arg being the
// run's argument. It returns how many kills there were.
func EachKill(t testing.TB, test string, fresh func() string, after func(arg, call string, n int)) int {
	t.Helper()
	kills := 0
	for _, call := range Writes {
		for n := 1; ; n++ {
			arg := fresh()
			if !KillAt(t, test, arg, call, n) {
				break
			}
			kills++
			after(arg, call, n)
		}
	}
	return kills
}

// Trace runs test with arg to its end under strace and returns its calls of Writes, of
// openat and of mkdir, one a line as strace prints them, each file descriptor followed by its path
// in angle brackets (strace -y): "fsync(3</data/dir>) = 0".
func Trace(t testing.TB, test, arg string) []string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "strace.log")
	if out, err := run(t, test, arg, "-o", log, "-y", "-e", "trace=openat,mkdir,mkdirat,"+strings.Join(Writes, ",")); err != nil {
		t.Fatalf("%s: %v\n%s", test, err, out)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	return joinResumed(strings.Split(strings.TrimSpace(string(data)), "\n"))
}

// joinResumed is lines with each call strace split in two, as another thread's call came
// between its start and its end ("27110 fsync(5</dir> <unfinished ...>", then "27110 <...
// fsync resumed>) = 0"), made one line again where it ended: "27110 fsync(5</dir>) = 0".
func joinResumed(lines []string) []string {
	started := map[string]string{} // by pid, the start of its call
	var out []string
	for _, l := range lines {
		pid, rest, _ := strings.Cut(l, " ")
		if start, ok := strings.CutSuffix(l, " <unfinished ...>"); ok {
			started[pid] = start
			continue
		}
		if _, end, ok := strings.Cut(rest, " resumed>"); ok && strings.HasPrefix(strings.TrimLeft(rest, " "), "<... ") {
			l = started[pid] + end
			delete(started, pid)
		}
		out = append(out, l)
	}
	return out
}

// run runs test under strace with the options given before the command.
func run(t testing.TB, test, arg string, opts ...string) ([]byte, error) {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Fatalf("strace is not installed (.ci/deps.sh installs it): %v", err)
	}
	args := append([]string{"-f", "-qq"}, opts...)
	args = append(args, "--", os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd := exec.Command(strace, args...)
	cmd.Env = append(os.Environ(), argEnv+"="+arg)
	return cmd.CombinedOutput()
}

// SyncedDir fails t unless calls (Trace's) fsync the directory of path after the last
// call that puts path's name in it or takes it out (creates the file or directory,
// renames or links onto it, removes it): until then a power loss may undo the change,
// whatever the file's own fsyncs kept.
func SyncedDir(t testing.TB, calls []string, path string) {
	t.Helper()
	last := lastCall(calls, func(c string) bool { return namesPath(c, path) })
	if last < 0 {
		t.Fatalf("no call creates %s or renames or links onto it:\n%s", path, strings.Join(calls, "\n"))
	}
	dir := filepath.Dir(path)
	if fsyncs(calls[last+1:], dir) {
		return
	}
	var there []string
	for _, c := range calls {
		if strings.Contains(c, dir) {
			there = append(there, c)
		}
	}
	t.Errorf("%s's directory is not fsynced after %q: a power loss may undo it\n%s", path, calls[last], strings.Join(there, "\n"))
}

// SyncedMode fails t unless calls (Trace's) fsync the file at path after the last call
// that changes its mode (chmod by name, or fchmod of a descriptor of it): until then a
// power loss may undo the change. fdatasync does not count: it keeps the data, not the
// mode.
func SyncedMode(t testing.TB, calls []string, path string) {
	t.Helper()
	last := lastCall(calls, func(c string) bool { return changesMode(c, path) })
	if last < 0 {
		t.Fatalf("no call changes the mode of %s:\n%s", path, strings.Join(calls, "\n"))
	}
	if fsyncs(calls[last+1:], path) {
		return
	}
	t.Errorf("%s is not fsynced after %q: a power loss may undo its mode", path, calls[last])
}

// lastCall is the index of the last of calls that is, -1 when none is.
func lastCall(calls []string, is func(string) bool) int {
	last := -1
	for i, c := range calls {
		if is(c) {
			last = i
		}
	}
	return last
}

// fsyncs reports whether one of calls fsyncs path (fdatasync does not count).
func fsyncs(calls []string, path string) bool {
	for _, c := range calls {
		if strings.Contains(c, "fsync(") && strings.Contains(c, "<"+path+">)") {
			return true
		}
	}
	return false
}

// changesMode reports whether the strace line c is a call that changes the mode of path.
func changesMode(c, path string) bool {
	_, call, _ := strings.Cut(c, " ")
	call, _, _ = strings.Cut(strings.TrimLeft(call, " "), "(")
	switch call {
	case "chmod", "fchmodat":
		return strings.Contains(c, `"`+path+`"`)
	case "fchmod":
		return strings.Contains(c, "<"+path+">,")
	}
	return false
}

// namesPath reports whether the strace line c is a call that puts path's name in its
// directory, or takes it out: an open that may create it, a mkdir, a rename, a link or
// an unlink.
func namesPath(c, path string) bool {
	if !strings.Contains(c, `"`+path+`"`) {
		return false
	}
	_, call, _ := strings.Cut(c, " ") // after the pid, padded to a width
	call, _, _ = strings.Cut(strings.TrimLeft(call, " "), "(")
	switch call {
	case "open", "openat", "creat":
		return strings.Contains(c, "O_CREAT")
	case "mkdir", "mkdirat", "rename", "renameat", "renameat2", "link", "linkat", "unlink", "unlinkat":
		return true
	}
	return false
}
