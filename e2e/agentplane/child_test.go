package agentplane

import (
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// TestChildEndsAreReported: a child process (agents, a peer, a registry) that ends before
// its test asks it to fails the test at once, saying which child it was, how it ended and
// the end of its stderr, whether it ends before it is ready, while the test waits for
// something, or before it answers a question; a child the test stops or kills does not.
func TestChildEndsAreReported(t *testing.T) {
	ca, _ := newCA(t)
	withCA := t.TempDir()
	writeCA(t, ca, withCA)
	never := func() bool { return false }

	t.Run("before it is ready", func(t *testing.T) {
		got := fatalOf(t, func(tb testing.TB) {
			startChild(tb, "agents", "BC_DIR="+t.TempDir(), "BC_ADDR=127.0.0.1:1", "BC_COUNT=1") // no CA in BC_DIR
		})
		mustSay(t, got, "agents child BC_ADDR=127.0.0.1:1 BC_COUNT=1", "exit status 1", "ca.crt: no such file or directory")
	})
	t.Run("while the test waits", func(t *testing.T) {
		got := fatalOf(t, func(tb testing.TB) {
			c := startChild(tb, "listener", "BC_DIR="+withCA)
			c.cmd.Process.Signal(syscall.SIGTERM) // as a kill from outside would
			waitFor(tb, "the agents to connect", never)
		})
		mustSay(t, got, "listener child", "ended unasked while waiting for the agents to connect", "signal: terminated", "into the run")
	})
	t.Run("before it answers", func(t *testing.T) {
		got := fatalOf(t, func(tb testing.TB) {
			c := startChild(tb, "listener", "BC_DIR="+withCA)
			c.cmd.Process.Kill()
			c.ask("count")
		})
		mustSay(t, got, "listener child", "no answer", "signal: killed")
	})
	t.Run("stopped or killed as asked", func(t *testing.T) {
		got := fatalOf(t, func(tb testing.TB) {
			stopped := startChild(tb, "listener", "BC_DIR="+withCA)
			killed := startChild(tb, "listener", "BC_DIR="+withCA)
			stopped.stop()
			killed.kill()
			waitFor(tb, "nothing", func() bool { return true })
		})
		if got != "" {
			t.Fatalf("children ended as asked failed the test: %s", got)
		}
	})
}

// fatalOf runs f as a test and returns the message it failed with ("" when it did not).
func fatalOf(t *testing.T, f func(testing.TB)) string {
	tb := &fatalRecorder{TB: t, msg: make(chan string, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(tb)
	}()
	<-done
	select {
	case msg := <-tb.msg:
		return msg
	default:
		return ""
	}
}

// fatalRecorder is a test whose Fatal and Fatalf record the message and end the goroutine.
type fatalRecorder struct {
	testing.TB
	msg chan string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatal(args ...any) { r.msg <- fmt.Sprint(args...); runtime.Goexit() }

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg <- fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func mustSay(t *testing.T, got string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(got, p) {
			t.Errorf("the failure does not say %q:\n%s", p, got)
		}
	}
}
