// Package testkit runs the project's real binaries for tests: it builds them once per
// test process, starts `better-compute serve` on loopback in a temporary data directory,
// and runs CLI and bcd commands against it; it also makes test CAs and certificates for
// the agent plane, and holds the fixtures the end-to-end tests share (HTTPS image
// sources, signed images registered through the CLI, sparse disks). Only tests import
// it.
package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/api"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Binary returns the path of a freshly built project binary ("better-compute" or "bcd"),
// building all of them on first use.
func Binary(t testing.TB, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		removeStaleBinaries(os.TempDir())
		binDir, buildErr = os.MkdirTemp("", fmt.Sprintf("%s%d-", binPrefix, os.Getpid()))
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "./better-compute", "./bcd")
		cmd.Dir = moduleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = &buildError{out: string(out), err: err}
		}
	})
	if buildErr != nil {
		t.Fatalf("build binaries: %v", buildErr)
	}
	return filepath.Join(binDir, name)
}

// binPrefix starts the name of the folder a test process builds the binaries into,
// followed by its pid.
const binPrefix = "bc-bin-"

// removeStaleBinaries removes from dir the binaries' folders of test processes that
// have ended. A test process cannot remove its own when it exits (the packages that use
// testkit have no TestMain of their own), so the next one does: without it, every test
// run left its two binaries behind, about 45 MiB. Folders named before the pid was part
// of the name go once they are a day old, older than any test run.
func removeStaleBinaries(dir string) {
	folders, _ := filepath.Glob(filepath.Join(dir, binPrefix+"*"))
	for _, f := range folders {
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(f), binPrefix+"%d-", &pid); err != nil {
			if st, err := os.Stat(f); err == nil && time.Since(st.ModTime()) > 24*time.Hour {
				os.RemoveAll(f)
			}
			continue
		}
		if pid != os.Getpid() && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			os.RemoveAll(f)
		}
	}
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// moduleRoot is the directory of go.mod, found from this file's location.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// RamdiskImage builds (or finds in its cache) the test ramdisk with
// scripts/ramdisk-test-image.sh and returns its directory; the test is skipped on a
// machine without the tools that build it.
func RamdiskImage(t testing.TB) string {
	t.Helper()
	for _, tool := range []string{"apt-get", "dpkg-deb", "cpio", "gzip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s to build the test ramdisk", tool)
		}
	}
	out, err := exec.Command(filepath.Join(moduleRoot(), "scripts", "ramdisk-test-image.sh")).Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += "\n" + string(ee.Stderr)
		}
		t.Fatalf("scripts/ramdisk-test-image.sh: %s", msg)
	}
	return strings.TrimSpace(string(out))
}

// Registry is a running `better-compute serve`.
type Registry struct {
	DataDir     string
	AdminConfig string
	URL         string
	// AgentEndpoint is the agents' QUIC endpoint, host:port on UDP.
	AgentEndpoint string
	// MetricsURL is where the registry serves its metrics, when started with
	// --metrics-listen.
	MetricsURL string
	// Pins are the registry's pins, as `serve` printed them.
	Pins   joinwire.Pins
	cmd    *exec.Cmd
	exited chan struct{}
	// Stderr is the registry's log, safe to read while it runs.
	Stderr *SyncBuffer
}

// StartRegistry starts `better-compute serve` on a free loopback port in dataDir (a new
// temporary directory when empty), with any further serve flags, and stops it when the
// test ends. The data directory is made mode 0700 first, as serve wants it (t.TempDir
// makes 0777 less the umask).
func StartRegistry(t testing.TB, dataDir string, serveArgs ...string) *Registry {
	t.Helper()
	return StartRegistryVia(t, nil, dataDir, serveArgs...)
}

// StartRegistryVia starts the registry as StartRegistry does, through the command
// prefix (its program and arguments), given the binary and serve's arguments after it
// and expected to exec them in its own process, as `sh -c '...; exec "$0" "$@"'` does
// (to start the registry in a cgroup, say).
func StartRegistryVia(t testing.TB, prefix []string, dataDir string, serveArgs ...string) *Registry {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	if err := os.Chmod(dataDir, 0o700); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	r := &Registry{DataDir: dataDir, AdminConfig: filepath.Join(dataDir, "admin.conf"), Stderr: &SyncBuffer{}, exited: make(chan struct{})}
	args := append([]string{"serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0", "--format", "json"}, serveArgs...)
	argv := slices.Concat(prefix, []string{Binary(t, "better-compute")}, args)
	r.cmd = exec.Command(argv[0], argv[1:]...)
	stdout := &SyncBuffer{}
	r.cmd.Stdout, r.cmd.Stderr = stdout, r.Stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(r.Stop)
	deadline := time.After(20 * time.Second)
	for {
		var info struct {
			URL           string
			AgentEndpoint string
			MetricsURL    string
			Pins          joinwire.Pins
		}
		if json.NewDecoder(strings.NewReader(stdout.String())).Decode(&info) == nil && info.URL != "" {
			r.URL, r.AgentEndpoint, r.MetricsURL, r.Pins = info.URL, info.AgentEndpoint, info.MetricsURL, info.Pins
			return r
		}
		select {
		case <-r.exited:
			t.Fatalf("the registry exited at start (%v); stdout:\n%s\nstderr:\n%s", r.cmd.ProcessState, stdout, r.Stderr)
		case <-deadline:
			t.Fatalf("registry did not start; stderr:\n%s", r.Stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StartReplicas starts n registries on the etcd cluster of etcdEndpoints as the README
// ("Running three registries") runs them: the first makes the key-encryption key file;
// each other starts in a data directory of its own with a copy of that file and of the
// first one's admin.conf; all are given every replica's agent endpoint (loopback UDP
// ports picked here). serveArgs, if set, gives replica i's further serve flags.
func StartReplicas(t testing.TB, etcdEndpoints []string, n int, serveArgs func(i int) []string) []*Registry {
	t.Helper()
	agents := make([]string, n)
	for i := range agents {
		agents[i] = fmt.Sprintf("127.0.0.1:%d", FreePort(t, "udp"))
	}
	firstKEK := filepath.Join(t.TempDir(), "kek")
	regs := make([]*Registry, n)
	for i := range regs {
		dir, kek := t.TempDir(), firstKEK
		if i > 0 {
			kek = filepath.Join(t.TempDir(), "kek")
			CopyFile(t, firstKEK, kek)
			CopyFile(t, regs[0].AdminConfig, filepath.Join(dir, "admin.conf"))
		}
		args := []string{"--agent-listen", agents[i], "--store", "etcd", "--etcd-endpoints", strings.Join(etcdEndpoints, ","),
			"--kek-file", kek, "--agent-endpoints", strings.Join(agents, ",")}
		if serveArgs != nil {
			args = append(args, serveArgs(i)...)
		}
		regs[i] = StartRegistry(t, dir, args...)
	}
	return regs
}

// CopyFile copies from to to, mode 0600, as an operator copies a key or a CLI config.
func CopyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	WriteFile(t, to, b, 0o600)
}

// Stop stops the registry (SIGTERM) and waits for it.
func (r *Registry) Stop() {
	select {
	case <-r.exited:
		return
	default:
	}
	r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		<-r.exited
	}
}

// PeakRSS is the most resident memory the registry's process has used since it started
// (VmHWM of /proc/PID/status), in bytes.
func (r *Registry) PeakRSS(t testing.TB) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("read the registry's memory use: %v", err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", line, err)
			}
			return n << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", r.cmd.Process.Pid)
	return 0
}

// Exits waits for the registry to exit by itself and returns its exit code; the test
// fails when it still runs after d (a guard against a hang, not a measure).
func (r *Registry) Exits(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-r.exited:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("the registry still runs after %v; stderr:\n%s", d, r.Stderr)
		return 0
	}
}

// Kill stops the registry at once (SIGKILL), as a crash would.
func (r *Registry) Kill() {
	r.cmd.Process.Kill()
	<-r.exited
}

// Result is what one CLI run printed and its exit status.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// CLI runs `better-compute args...` with BC_CONFIG set to config.
func CLI(t testing.TB, config string, args ...string) Result {
	t.Helper()
	return run(t, "better-compute", []string{"BC_CONFIG=" + config}, args, nil, nil, runLimit)
}

// CLIInput is CLI with stdin as the command's standard input.
func CLIInput(t testing.TB, config string, stdin io.Reader, args ...string) Result {
	t.Helper()
	return run(t, "better-compute", []string{"BC_CONFIG=" + config}, args, stdin, nil, runLimit)
}

// CLIShow is CLI with what the command prints copied to show as it comes, for a run a
// person watches (a long `nodes deploy --wait`): it may run for showLimit, as a workflow
// on a loaded machine's VM does.
func CLIShow(t testing.TB, config string, show io.Writer, args ...string) Result {
	t.Helper()
	return run(t, "better-compute", []string{"BC_CONFIG=" + config}, args, nil, show, showLimit)
}

// BCD runs `bcd args...`.
func BCD(t testing.TB, args ...string) Result {
	t.Helper()
	return run(t, "bcd", nil, args, nil, nil, runLimit)
}

// runLimit bounds a command's run: a guard against a hang, not a measure. showLimit is
// CLIShow's, for commands that follow a workflow to its end.
const (
	runLimit  = 2 * time.Minute
	showLimit = 10 * time.Minute
)

// run runs a project binary with extra environment variables and stdin (none when nil),
// copying its output to show when show is not nil, for at most limit.
func run(t testing.TB, name string, env, args []string, stdin io.Reader, show io.Writer, limit time.Duration) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t, name), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if show != nil {
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, show), io.MultiWriter(&errb, show)
	}
	err := cmd.Run()
	res := Result{Stdout: out.String(), Stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		res.Code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return res
}

// JSON runs a CLI command with --format json and decodes its stdout into v, failing the
// test unless it exits 0.
func JSON(t testing.TB, config string, v any, args ...string) {
	t.Helper()
	res := CLI(t, config, append(args, "--format", "json")...)
	if res.Code != 0 {
		t.Fatalf("better-compute %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.Code, res.Stdout, res.Stderr)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(res.Stdout), v); err != nil {
			t.Fatalf("decode output of %v: %v\n%s", args, err, res.Stdout)
		}
	}
}

// Fails runs a CLI command with --format json that must fail (exit 1), and returns the
// error object it printed.
func Fails(t testing.TB, config string, args ...string) ErrorObject {
	t.Helper()
	return FailsExit(t, 1, config, args...)
}

// UsageFails runs a CLI command with --format json whose command line is wrong (exit 2),
// and returns the error object it printed.
func UsageFails(t testing.TB, config string, args ...string) ErrorObject {
	t.Helper()
	return FailsExit(t, 2, config, args...)
}

// FailsExit runs a CLI command with --format json that must exit with exit (1: the call
// failed, 2: the command line is wrong), and returns the error object it printed.
func FailsExit(t testing.TB, exit int, config string, args ...string) ErrorObject {
	t.Helper()
	res := CLI(t, config, append(args, "--format", "json")...)
	if res.Code != exit {
		t.Fatalf("better-compute %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.Code, exit, res.Stdout, res.Stderr)
	}
	var e ErrorObject
	if err := json.Unmarshal([]byte(res.Stdout), &e); err != nil {
		t.Fatalf("decode error of %v: %v\n%s", args, err, res.Stdout)
	}
	return e
}

// ErrorObject is the error a failed command prints with --format json.
type ErrorObject struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
	} `json:"details"`
}

// Client returns an API client for a CLI config file.
func Client(t testing.TB, config string) *api.Client {
	t.Helper()
	cfg, err := api.LoadClientConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// SyncBuffer is a buffer a running command writes while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// JoinSite joins a site agent for site with a single-use site token through the real
// `bcd join --role site`, into a new directory, and returns that configuration directory
// (bcdconf.LoadAgent reads it).
func JoinSite(t testing.TB, reg *Registry, site string) string {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	JSON(t, reg.AdminConfig, nil, "tokens", "create", "--kind", "site", "--site", site, "--out", tokenFile)
	if res := BCD(t, "join", "--server", reg.URL, "--token-file", tokenFile, "--node-id", site, "--role", "site", "--config-dir", dir,
		"--serving-ca-pin", reg.Pins.ServingCA, "--join-signing-pin", reg.Pins.JoinSigning, "--join-encryption-pin", reg.Pins.JoinEncryption); res.Code != 0 {
		t.Fatalf("bcd join --role site: %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	return dir
}

// Scrape reads the Prometheus text at url into its samples, keyed by series as the text
// writes them (name{label="value",...}, labels in name order), and returns the text too.
func Scrape(t testing.TB, url string) (map[string]float64, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s %v\n%s", url, resp.Status, err, body)
	}
	return ParseMetrics(t, string(body)), string(body)
}

// ParseMetrics reads Prometheus text into its samples, keyed as Scrape keys them.
func ParseMetrics(t testing.TB, text string) map[string]float64 {
	t.Helper()
	samples := map[string]float64{}
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics: %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	return samples
}
