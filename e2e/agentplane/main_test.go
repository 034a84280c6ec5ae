package agentplane

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	os.Exit(m.Run())
}

// child is a child process of this package that reads requests on stdin and answers
// one line each on stdout.
type child struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin *os.File
	out   *bufio.Scanner
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
	cmd.Stderr = os.Stderr
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
	c := &child{t: t, cmd: cmd, stdin: inW, out: bufio.NewScanner(stdout)}
	t.Cleanup(c.stop)
	if got := c.line(); got != "ready" {
		t.Fatalf("%s child: %q, want ready", kind, got)
	}
	return c
}

func (c *child) line() string {
	if !c.out.Scan() {
		return ""
	}
	return c.out.Text()
}

// ask sends one request and returns the answer.
func (c *child) ask(format string, args ...any) string {
	c.t.Helper()
	fmt.Fprintf(c.stdin, format+"\n", args...)
	return c.line()
}

// stop closes the child's stdin, which ends it, and waits for it (killing it after 30 s).
func (c *child) stop() {
	if c.cmd.ProcessState != nil {
		return
	}
	c.stdin.Close()
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		c.kill()
	}
}

// kill ends the child at once, as a crash would.
func (c *child) kill() {
	c.cmd.Process.Kill()
	c.cmd.Wait()
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
