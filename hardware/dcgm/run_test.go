package dcgm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/hardware/dcgm/dcgmtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// gpuRoot is a machine's sysfs with one NVIDIA GPU under a root of its own.
func gpuRoot(t *testing.T) string {
	root := t.TempDir()
	dcgmtest.NvidiaGPU(t, root)
	return root
}

// standIn writes an executable shell script into dir; tests put dir first on PATH.
func standIn(t *testing.T, dir, name, script string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// closedAddr is a loopback address nothing listens on: where no host engine runs.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// bin is a directory of stand-ins that is the whole PATH of the test, with the tools
// the scripts use linked in.
func bin(t *testing.T) string {
	dir := t.TempDir()
	for _, tool := range []string{"sh", "cat", "sleep", "rm", "touch", "echo", "head"} {
		if p, err := hostTool(tool); err == nil {
			os.Symlink(p, filepath.Join(dir, tool))
		}
	}
	t.Setenv("PATH", dir)
	return dir
}

func hostTool(tool string) (string, error) {
	for _, d := range []string{"/usr/bin", "/bin"} {
		if _, err := os.Stat(filepath.Join(d, tool)); err == nil {
			return filepath.Join(d, tool), nil
		}
	}
	return "", os.ErrNotExist
}

func reasonOf(err error) (proto.Code, string) {
	e := proto.AsError(err)
	return e.Code, e.Details.Reason
}

func TestRunWithoutGPU(t *testing.T) {
	dir := bin(t)
	standIn(t, dir, "dcgmi", "exit 0\n")
	_, err := Runner{Root: t.TempDir()}.Run(t.Context(), 1)
	if code, reason := reasonOf(err); code != proto.Unsupported || reason != proto.ReasonNoGPU {
		t.Fatalf("%v", err)
	}
}

func TestRunWithoutDCGM(t *testing.T) {
	bin(t) // no dcgmi on PATH
	_, err := Runner{Root: gpuRoot(t)}.Run(t.Context(), 1)
	if code, reason := reasonOf(err); code != proto.Unsupported || reason != proto.ReasonDCGMMissing {
		t.Fatalf("%v", err)
	}
	if !strings.Contains(err.Error(), "1 NVIDIA GPU") {
		t.Errorf("the message does not say what was found: %v", err)
	}
}

func TestRunRefusesLevels(t *testing.T) {
	for _, level := range []int{-1, 5} {
		_, err := Runner{Root: gpuRoot(t)}.Run(t.Context(), level)
		if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "level" {
			t.Errorf("level %d: %v", level, err)
		}
	}
}

// The stand-in host engine writes its pid and its argv, makes its socket, and removes
// it when stopped; the stand-in dcgmi checks it was pointed at that socket, which exists.
const hostEngine = `
while [ $# -gt 0 ]; do
	case "$1" in --domain-socket) sock="$2"; shift;; esac
	shift
done
echo $$ > "$STATE/engine.pid"
trap 'rm -f "$sock"; echo stopped > "$STATE/engine.stopped"; exit 0' TERM
touch "$sock"
while :; do sleep 1; done
`

const dcgmiOnSocket = `
echo "$@" > "$STATE/dcgmi.args"
case "$*" in *"--host unix://"*) ;; *) echo "not pointed at the started host engine" >&2; exit 3;; esac
sock="${*##*unix://}"
[ -e "$sock" ] || { echo "no host engine at $sock" >&2; exit 4; }
cat "$RECORDED"
exit "$EXIT"
`

func TestRunStartsAndStopsHostEngine(t *testing.T) {
	dir, state := bin(t), t.TempDir()
	standIn(t, dir, "nv-hostengine", hostEngine)
	standIn(t, dir, "dcgmi", dcgmiOnSocket)
	t.Setenv("STATE", state)
	for _, tc := range []struct {
		recorded string
		exit     int
		passed   bool
	}{
		{"dcgm4-pass.json", 0, true},
		// dcgmi exits non-zero when a test fails; its JSON is the answer all the same.
		{"dcgm3-fail.json", 226, false},
	} {
		abs := dcgmtest.Recorded(tc.recorded)
		t.Setenv("RECORDED", abs)
		t.Setenv("EXIT", strconv.Itoa(tc.exit))
		os.Remove(filepath.Join(state, "engine.stopped"))
		res, err := Runner{Root: gpuRoot(t), HostEngineAddr: closedAddr(t)}.Run(t.Context(), 2)
		if err != nil {
			t.Fatalf("%s: %v", tc.recorded, err)
		}
		if res.Passed != tc.passed || res.Level != 2 || len(res.Tests) == 0 {
			t.Errorf("%s: passed %v, level %d, %d tests", tc.recorded, res.Passed, res.Level, len(res.Tests))
		}
		args, _ := os.ReadFile(filepath.Join(state, "dcgmi.args"))
		if !strings.HasPrefix(string(args), "diag -r 2 -j --host unix://") {
			t.Errorf("dcgmi ran with %q", args)
		}
		if _, err := os.Stat(filepath.Join(state, "engine.stopped")); err != nil {
			t.Errorf("%s: the started host engine was not stopped", tc.recorded)
		}
	}
}

func TestRunUsesARunningHostEngine(t *testing.T) {
	dir, state := bin(t), t.TempDir()
	standIn(t, dir, "nv-hostengine", `touch "$STATE/engine.started"; exit 1`)
	standIn(t, dir, "dcgmi", `echo "$@" > "$STATE/dcgmi.args"; cat "$RECORDED"`)
	abs := dcgmtest.Recorded("dcgm3-pass.json")
	t.Setenv("STATE", state)
	t.Setenv("RECORDED", abs)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	res, err := Runner{Root: gpuRoot(t), HostEngineAddr: l.Addr().String()}.Run(t.Context(), 1)
	if err != nil || !res.Passed {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(state, "engine.started")); err == nil {
		t.Error("a host engine was started beside the running one")
	}
	if args, _ := os.ReadFile(filepath.Join(state, "dcgmi.args")); strings.TrimSpace(string(args)) != "diag -r 1 -j --host "+l.Addr().String() {
		t.Errorf("dcgmi ran with %q", args)
	}
}

func TestRunFailures(t *testing.T) {
	for name, tc := range map[string]struct {
		engine, dcgmi string
		code          proto.Code
		says          string
	}{
		"no result":      {hostEngine, `echo "Error: unable to establish a connection to the host engine" >&2; exit 1`, proto.DriverError, "unable to establish"},
		"engine dies":    {`echo "NVML could not be loaded" >&2; exit 1`, `exit 0`, proto.DriverError, "NVML could not be loaded"},
		"engine missing": {"", `exit 0`, proto.Unsupported, "nv-hostengine is missing"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := bin(t)
			t.Setenv("STATE", t.TempDir())
			if tc.engine != "" {
				standIn(t, dir, "nv-hostengine", tc.engine)
			}
			standIn(t, dir, "dcgmi", tc.dcgmi)
			_, err := Runner{Root: gpuRoot(t), HostEngineAddr: closedAddr(t)}.Run(t.Context(), 1)
			if e := proto.AsError(err); e.Code != tc.code || !strings.Contains(e.Message, tc.says) {
				t.Fatalf("%v", err)
			}
		})
	}
}

// A cancelled run (the agent stopping, the timeout) kills dcgmi's whole process group:
// the stand-in starts a child as nvvs would, and neither survives.
func TestRunCancelKillsTheProcessGroup(t *testing.T) {
	dir, state := bin(t), t.TempDir()
	standIn(t, dir, "nv-hostengine", hostEngine)
	standIn(t, dir, "dcgmi", `sleep 600 & echo $! > "$STATE/child.pid"; echo $$ > "$STATE/dcgmi.pid"; wait`)
	t.Setenv("STATE", state)
	for _, how := range []string{"cancel", "timeout"} {
		os.Remove(filepath.Join(state, "child.pid"))
		ctx, cancel := context.WithCancel(t.Context())
		r := Runner{Root: gpuRoot(t), HostEngineAddr: closedAddr(t)}
		if how == "timeout" {
			r.Timeout = 2 * time.Second
		} else {
			go func() {
				waitFile(t, filepath.Join(state, "child.pid"))
				cancel()
			}()
		}
		_, err := r.Run(ctx, 3)
		cancel()
		// A timeout is the answer TIMEOUT; the agent stopping gives no answer (the
		// registry sends the command to its next run).
		if how == "timeout" && proto.CodeOf(err) != proto.Timeout || how == "cancel" && !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v", how, err)
		}
		for _, f := range []string{"child.pid", "dcgmi.pid", "engine.pid"} {
			b, _ := os.ReadFile(filepath.Join(state, f))
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if pid > 0 && alive(pid) {
				t.Errorf("%s: %s %d still runs", how, f, pid)
			}
		}
	}
}

func waitFile(t *testing.T, path string) {
	for range 600 {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("%s never appeared", path)
}

// alive reports whether pid runs (a zombie waiting for its reaper does not).
func alive(pid int) bool {
	for range 100 { // the kernel reaps a killed process's children shortly after
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return syscall.Kill(pid, 0) == nil
}

func TestCommand(t *testing.T) {
	bin(t)
	_, err := Runner{Root: t.TempDir()}.Command(t.Context(), json.RawMessage(`{"level": "high"}`))
	if !errors.Is(err, &proto.Error{Code: proto.InvalidInput}) {
		t.Errorf("%v", err)
	}
}

// TestRunJudgesEveryGPUOnPCI: DCGM numbers the GPUs its driver sees, so a GPU on PCI that
// DCGM did not see has no result; the answer says how many GPUs the machine has and
// does not pass unless a test passed on each. Before, a run on 7 GPUs of a machine of 8,
// and a run whose every test was skipped, passed.
func TestRunJudgesEveryGPUOnPCI(t *testing.T) {
	dir := bin(t)
	standIn(t, dir, "dcgmi", `cat "$RECORDED"`)
	root := t.TempDir()
	for i := range 8 { // an HGX board: 8 H100 on PCI
		dev := filepath.Join(root, "sys/bus/pci/devices", fmt.Sprintf("0000:%02x:00.0", 0x17+i))
		os.MkdirAll(dev, 0o755)
		for name, v := range map[string]string{"vendor": "0x10de\n", "device": "0x2330\n", "class": "0x030200\n"} {
			if err := os.WriteFile(filepath.Join(dev, name), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	passed, err := os.ReadFile(dcgmtest.Recorded("dcgm4-pass.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	json.Unmarshal(passed, &doc)
	test := doc["DCGM Diagnostic"].(map[string]any)["test_categories"].([]any)[0].(map[string]any)["tests"].([]any)[0].(map[string]any)
	test["results"] = test["results"].([]any)[:7] // DCGM saw GPUs 0 to 6
	sevenGPUs, _ := json.Marshal(doc)
	dcgm33, err := os.ReadFile(dcgmtest.Recorded("dcgm33-fail.json"))
	if err != nil {
		t.Fatal(err)
	}
	twoGPUs := []byte(strings.ReplaceAll(string(dcgm33), `"Fail"`, `"Pass"`)) // DCGM 3.3 ran on GPUs 0 and 1

	for name, tc := range map[string]struct {
		out      []byte
		passed   bool
		untested []int
	}{
		"every GPU passed":       {passed, true, nil},
		"GPU 7 not seen by DCGM": {sevenGPUs, false, []int{7}},
		"every test skipped":     {[]byte(strings.ReplaceAll(string(passed), `"Pass"`, `"Skip"`)), false, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		"DCGM 3.3 on 2 GPUs":     {twoGPUs, false, []int{2, 3, 4, 5, 6, 7}},
	} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.json")
			os.WriteFile(out, tc.out, 0o644)
			t.Setenv("RECORDED", out)
			res, err := Runner{Root: root, HostEngineAddr: runningEngine(t)}.Run(t.Context(), 1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Passed != tc.passed || res.GPUs != 8 || len(res.Failures()) != 0 {
				t.Errorf("passed %v on %d GPUs, failures %v; want passed %v on 8 GPUs", res.Passed, res.GPUs, res.Failures(), tc.passed)
			}
			if diff := cmp.Diff(tc.untested, res.Untested()); diff != "" {
				t.Errorf("untested GPUs (-want +got):\n%s", diff)
			}
		})
	}
}

// runningEngine is a loopback address a host engine listens on.
func runningEngine(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String()
}

// TestRunBoundsDCGMIsOutput: what dcgmi prints is kept up to 16 MiB (a level 4 run on 8
// GPUs prints a few hundred KiB) and the rest is read and dropped. Before, the bound was
// never applied: io.Copy wrote dcgmi's output through the buffer's own ReadFrom, so a
// stand-in printing 64 MiB had all of it kept (256 MiB allocated as the buffer grew).
func TestRunBoundsDCGMIsOutput(t *testing.T) {
	dir := bin(t)
	standIn(t, dir, "dcgmi", "head -c 67108864 /dev/zero\n")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Runner{Root: gpuRoot(t), HostEngineAddr: runningEngine(t)}.Run(t.Context(), 1)
	runtime.ReadMemStats(&after)
	if proto.CodeOf(err) != proto.DriverError {
		t.Errorf("%v", err)
	}
	// Kept whole, the buffer grew to 256 MiB of allocations; bounded, 16 MiB are kept
	// and the rest read through a small buffer, which the race detector's sync.Pool,
	// dropping pooled buffers at random, makes up to 64 MiB of allocations.
	if n := after.TotalAlloc - before.TotalAlloc; n > 128<<20 {
		t.Errorf("running a dcgmi that printed 64 MiB allocated %d MiB", n>>20)
	}
}
