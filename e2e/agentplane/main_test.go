package agentplane

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/testkit"
)

// childEnv selects what a re-executed test binary runs instead of the tests.
const childEnv = "BC_AGENTPLANE_CHILD"

// TestMain runs the tests, or, in a child process this package started, a registry on
// bbolt or one replica on etcd (kill_test.go, replicas_test.go), a batch of load agents,
// the bare QUIC clients of a peer (load_test.go), or the listener of the idle fleet's
// peer (idle_test.go).
func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "registry":
		os.Exit(runRegistryChild())
	case "agents":
		os.Exit(runAgentsChild())
	case "bare":
		os.Exit(runBareChild())
	case "resume":
		os.Exit(runResumeChild())
	case "listener":
		os.Exit(runListenerChild())
	}
	go reportSignal()
	os.Exit(m.Run())
}

// child is a child process of this package that reads requests on stdin and answers
// one line each on stdout. Its stderr goes to this process's and the end of it is kept
// for the report of an early end (report).
type child struct {
	t       testing.TB
	what    string // its kind and environment, for reports
	cmd     *exec.Cmd
	stdin   *os.File
	out     *bufio.Scanner
	stderr  *tail
	started time.Time
	ended   chan struct{} // closed once it ended; cmd.ProcessState and endedAt are set from then on
	endedAt time.Time
	// asked is set when the test ends it (stop, kill): any other end is unasked.
	asked atomic.Bool
}

// children are the child processes started and not yet ended as asked, for the waits of
// the test that started each to fail as soon as one ends unasked.
var children struct {
	sync.Mutex
	all []*child
}

// startChild re-executes the test binary as kind with env, and waits for "ready".
func startChild(t testing.TB, kind string, env ...string) *child {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), append(env, childEnv+"="+kind)...)
	c := &child{t: t, what: describeChild(kind, env), cmd: cmd, stderr: &tail{}, ended: make(chan struct{})}
	cmd.Stderr = io.MultiWriter(os.Stderr, c.stderr)
	cmd.WaitDelay = 10 * time.Second // for its stderr, should a process it started hold it open
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = inR
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	c.stdin, c.out, c.started = inW, bufio.NewScanner(stdout), time.Now()
	go func() { cmd.Wait(); c.endedAt = time.Now(); close(c.ended) }()
	children.Lock()
	children.all = append(children.all, c)
	children.Unlock()
	t.Cleanup(c.stop)
	if got := c.line(); got != "ready" {
		t.Fatalf("%s: %q, want ready", c.what, got)
	}
	return c
}

// describeChild names a child for reports: its kind and the environment it was given,
// but for the directory of the CA, a temporary one.
func describeChild(kind string, env []string) string {
	var given []string
	for _, v := range env {
		if !strings.HasPrefix(v, "BC_DIR=") {
			given = append(given, v)
		}
	}
	return strings.TrimSpace(fmt.Sprintf("%s child %s", kind, strings.Join(given, " ")))
}

// line is the child's next line on stdout; it fails the test, saying why the child
// ended (report), when there is none.
func (c *child) line() string {
	c.t.Helper()
	if c.out.Scan() {
		return c.out.Text()
	}
	select {
	case <-c.ended:
	case <-time.After(10 * time.Second):
	}
	c.t.Fatalf("%s: no answer: %s", c.what, c.report())
	return ""
}

// ask sends one request and returns the answer.
func (c *child) ask(format string, args ...any) string {
	c.t.Helper()
	fmt.Fprintf(c.stdin, format+"\n", args...)
	return c.line()
}

// exited reports whether the child has ended.
func (c *child) exited() bool {
	select {
	case <-c.ended:
		return true
	default:
		return false
	}
}

// report says how the child ended, when, in which phase of this process (where), with
// the end of its stderr; or that it still runs.
func (c *child) report() string {
	if !c.exited() {
		return fmt.Sprintf("pid %d still runs, %s after it started, %s", c.cmd.Process.Pid, time.Since(c.started).Round(time.Millisecond), where())
	}
	return fmt.Sprintf("pid %d ended (%s) %s after it started, %s; the end of its stderr:\n%s",
		c.cmd.Process.Pid, c.cmd.ProcessState, c.endedAt.Sub(c.started).Round(time.Millisecond), where(), c.stderr)
}

// stop closes the child's stdin, which ends it, and waits for it (killing it after 30 s).
func (c *child) stop() {
	c.forget()
	if c.exited() {
		return
	}
	c.stdin.Close()
	select {
	case <-c.ended:
	case <-time.After(30 * time.Second):
		c.kill()
	}
}

// kill ends the child at once, as a crash would.
func (c *child) kill() {
	c.forget()
	c.cmd.Process.Kill()
	<-c.ended
	c.stdin.Close()
}

// forget marks the child's end as asked for.
func (c *child) forget() {
	c.asked.Store(true)
	children.Lock()
	defer children.Unlock()
	for i, o := range children.all {
		if o == c {
			children.all = append(children.all[:i], children.all[i+1:]...)
			break
		}
	}
}

// failIfEnded fails the test when a child process it started ended unasked, saying
// which, how and what the test was waiting for.
func failIfEnded(t testing.TB, what string) {
	t.Helper()
	children.Lock()
	var gone *child
	for _, c := range children.all {
		if c.t == t && !c.asked.Load() && c.exited() {
			gone = c
			break
		}
	}
	children.Unlock()
	if gone != nil {
		t.Fatalf("%s ended unasked while waiting for %s: %s", gone.what, what, gone.report())
	}
}

// waitUntil polls cond every interval until it holds, failing the test after d, or as
// soon as a child process the test started ends unasked (failIfEnded).
func waitUntil(t testing.TB, what string, d, interval time.Duration, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, what, d, interval, func() bool {
		failIfEnded(t, what)
		return cond()
	})
}

// sleepWatching sleeps for d, failing the test as soon as a child process it started
// ends unasked (failIfEnded); it looks once a second.
func sleepWatching(t testing.TB, what string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(min(time.Second, time.Until(end)))
		failIfEnded(t, what)
	}
}

// tail keeps the last tailSize bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 4096

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - tailSize; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

// String is what was kept, from its first whole line on, or "(nothing)".
func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := string(w.buf)
	if len(w.buf) == tailSize {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	if s = strings.TrimRight(s, "\n"); s == "" {
		return "(nothing)"
	}
	return s
}

// processStart is when this process started, and current the benchmark running in it
// and what it does (enterPhase), for the reports of an early end.
var (
	processStart = time.Now()
	current      struct {
		sync.Mutex
		b     *testing.B
		name  string
		since time.Time
	}
)

// enterPhase records that the benchmark b now does name, and prints it to stderr with
// the time into the run: should the process end before its figures are printed, its
// output says where it was. The first call of each benchmark also arranges for it to
// say where it failed, if it does.
func enterPhase(b *testing.B, name string) {
	current.Lock()
	first := current.b != b
	current.b, current.name, current.since = b, name, time.Now()
	current.Unlock()
	fmt.Fprintf(os.Stderr, "%s: %.1fs: %s\n", b.Name(), time.Since(processStart).Seconds(), name)
	if first {
		b.Cleanup(func() {
			if b.Failed() {
				fmt.Fprintf(os.Stderr, "%s: failed %s\n", b.Name(), where())
			}
			current.Lock()
			current.b, current.name = nil, ""
			current.Unlock()
		})
	}
}

// where is how long this process has run and the benchmark's phase, if it has any.
func where() string {
	current.Lock()
	defer current.Unlock()
	s := fmt.Sprintf("%.1fs into the run", time.Since(processStart).Seconds())
	if current.name != "" {
		s += fmt.Sprintf(", in phase %s (for %.1fs)", current.name, time.Since(current.since).Seconds())
	}
	return s
}

// reportSignal waits for the signals that end a process from outside (SIGTERM, SIGINT,
// SIGHUP), says on stderr which came and where (where), and ends the process by it, as
// it would have without.
func reportSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	sig := (<-ch).(syscall.Signal)
	fmt.Fprintf(os.Stderr, "agentplane: ended by %v (signal %d) %s\n", sig, int(sig), where())
	signal.Reset(sig)
	syscall.Kill(os.Getpid(), sig)
}

// writeCA saves ca in dir for child processes, which read it back with readCA.
func writeCA(t testing.TB, ca *testkit.CA, dir string) {
	t.Helper()
	certPEM, keyPEM, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readCA(dir string) (*testkit.CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, err
	}
	return testkit.LoadCA(certPEM, keyPEM)
}

// readServer reads the CA of dir (writeCA) and issues a server certificate from it, for a
// child process or a peer standing in for the registry.
func readServer(dir string) (*testkit.CA, tls.Certificate, error) {
	ca, err := readCA(dir)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	cert, err := ca.ServerCertificate()
	return ca, cert, err
}

// requests calls answer for each line of stdin until it closes, printing its answers.
func requests(answer func(fields []string) string) {
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println(answer(strings.Fields(in.Text())))
	}
}
