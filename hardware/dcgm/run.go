// Package dcgm is diag.dcgm on a machine: it finds the NVIDIA GPUs on PCI under an
// injected root (tests present one in a tree of their own), runs NVIDIA DCGM's
// diagnostics (`dcgmi diag -r LEVEL -j`) against a host engine, starting
// `nv-hostengine` for the run when none is running and stopping it after, and parses
// the JSON of DCGM 3 and DCGM 4 into every test's result on each GPU. `bcd ramdisk`
// and `bcd node` both answer diag.dcgm with it.
package dcgm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"

	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/better-compute/better-compute/hardware/inventory"
	"github.com/better-compute/better-compute/proto"
)

// Defaults of Runner.
const (
	// DefaultHostEngine is where a running nv-hostengine listens by default.
	DefaultHostEngine = "127.0.0.1:5555"
	// DefaultTimeout bounds a run: diag.dcgm's own timeout.
	DefaultTimeout = time.Hour
	// engineStart bounds how long a started nv-hostengine may take to listen.
	engineStart = 30 * time.Second
	// maxOutput bounds dcgmi's output kept; a level 4 run on 8 GPUs prints a few
	// hundred KiB.
	maxOutput = 16 << 20
)

// Runner runs DCGM's diagnostics on the machine.
type Runner struct {
	// Root is where sysfs is read from for the GPUs: "/" on a machine.
	Root string
	// DCGMI and HostEngine are the programs, looked up in PATH: "dcgmi" and
	// "nv-hostengine" when empty.
	DCGMI, HostEngine string
	// HostEngineAddr is where a running host engine is looked for; DefaultHostEngine
	// when empty.
	HostEngineAddr string
	// Timeout bounds the whole run; DefaultTimeout when zero.
	Timeout time.Duration
	// Log receives what the run does.
	Log *slog.Logger
	// Sign makes the answer of Command a node-signed result of kind diag.dcgm (the
	// agent's session.SignResult); nil answers the result unsigned.
	Sign func(ctx context.Context, kind string, result any) (json.RawMessage, error)
}

// Command is diag.dcgm's handler: payload is a proto.DiagDCGM, the answer a
// proto.DCGMResult, signed with Sign.
func (r Runner) Command(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
	var in proto.DiagDCGM
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &in); err != nil {
			return nil, proto.Errorf(proto.InvalidInput, "diag.dcgm: %v", err)
		}
	}
	res, err := r.Run(ctx, in.Level)
	if err != nil {
		return nil, err
	}
	if r.Sign == nil {
		return proto.Marshal(res)
	}
	return r.Sign(ctx, proto.CommandDiagDCGM, res)
}

// Run runs the diagnostic of level (0 is 1). A machine without an NVIDIA GPU, or
// without dcgmi, is UNSUPPORTED with reason no-gpu or dcgm-missing; a run that
// produced no result is DRIVER_ERROR. Failed tests are not an error: the result
// says which failed and how many GPUs the machine has on PCI, and the registry judges it.
func (r Runner) Run(ctx context.Context, level int) (proto.DCGMResult, error) {
	if level == 0 {
		level = 1
	}
	if level < 1 || level > 4 {
		return proto.DCGMResult{}, proto.Errorf(proto.InvalidInput, "diag.dcgm level %d: DCGM's levels are 1 to 4", level).WithPath("level")
	}
	gpus, err := inventory.GPUs(r.root())
	if err != nil {
		return proto.DCGMResult{}, err
	}
	if len(gpus) == 0 {
		return proto.DCGMResult{}, proto.Errorf(proto.Unsupported,
			"diag.dcgm: this machine has no NVIDIA GPU (no PCI display function of vendor 10de under %s)", filepath.Join(r.root(), "sys/bus/pci/devices")).WithReason(proto.ReasonNoGPU)
	}
	dcgmi, err := exec.LookPath(cmp.Or(r.DCGMI, "dcgmi"))
	if err != nil {
		return proto.DCGMResult{}, proto.Errorf(proto.Unsupported,
			"diag.dcgm: %d NVIDIA GPU(s), but no DCGM (%v): install datacenter-gpu-manager on the OS, or boot a ramdisk that carries it", len(gpus), err).WithReason(proto.ReasonDCGMMissing)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(r.Timeout, DefaultTimeout))
	defer cancel()
	host, stop, err := r.hostEngine(ctx)
	if parent.Err() != nil {
		return proto.DCGMResult{}, parent.Err()
	}
	if err != nil {
		return proto.DCGMResult{}, err
	}
	defer stop()
	args := []string{"diag", "-r", strconv.Itoa(level), "-j"}
	if host != "" {
		args = append(args, "--host", host)
	}
	r.log().Info("running DCGM's diagnostic", "level", level, "gpus", len(gpus), "dcgmi", dcgmi, "host", host)
	var stdout, stderr limited
	cmd := command(ctx, dcgmi, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if parent.Err() != nil { // the agent stops: no answer, the registry sends the command again
		return proto.DCGMResult{}, parent.Err()
	}
	if ctx.Err() != nil {
		return proto.DCGMResult{}, proto.Errorf(proto.Timeout, "diag.dcgm: dcgmi did not finish within %s: stopped", cmp.Or(r.Timeout, DefaultTimeout))
	}
	res, err := Parse(stdout.Bytes(), len(gpus))
	if err != nil {
		// dcgmi exits non-zero when a test fails, with its JSON on stdout; only output
		// that is not a result makes the exit status the answer.
		return proto.DCGMResult{}, proto.Errorf(proto.DriverError, "diag.dcgm: %v (dcgmi: %v; %s)", err, runErr, tail(stderr.Bytes()))
	}
	// The registry judges each GPU found on PCI: one DCGM did not see has no result.
	res.Level, res.GPUs = level, len(gpus)
	res.Passed = res.Passed && len(res.Untested()) == 0
	return res, nil
}

// hostEngine finds a running host engine, or starts nv-hostengine for the run on a
// socket of its own: the --host argument for dcgmi ("" for the default one) and what
// stops the started engine.
func (r Runner) hostEngine(ctx context.Context) (host string, stop func(), err error) {
	d := net.Dialer{Timeout: time.Second}
	if c, err := d.DialContext(ctx, "tcp", cmp.Or(r.HostEngineAddr, DefaultHostEngine)); err == nil {
		c.Close()
		return cmp.Or(r.HostEngineAddr, DefaultHostEngine), func() {}, nil
	}
	engine, err := exec.LookPath(cmp.Or(r.HostEngine, "nv-hostengine"))
	if err != nil {
		return "", nil, proto.Errorf(proto.Unsupported,
			"diag.dcgm: no host engine runs and nv-hostengine is missing (%v): install datacenter-gpu-manager", err).WithReason(proto.ReasonDCGMMissing)
	}
	dir, err := os.MkdirTemp("", "bcd-dcgm-")
	if err != nil {
		return "", nil, err
	}
	sock := filepath.Join(dir, "nv-hostengine.sock")
	var stderr limited
	cmd := command(context.WithoutCancel(ctx), engine, "-n", "--domain-socket", sock, "--log-filename", filepath.Join(dir, "nv-hostengine.log"))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, proto.Errorf(proto.DriverError, "diag.dcgm: starting nv-hostengine: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		os.RemoveAll(dir)
	}
	r.log().Info("started nv-hostengine for the run", "pid", cmd.Process.Pid, "socket", sock)
	deadline := time.NewTimer(engineStart)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(sock); err == nil {
			return "unix://" + sock, stop, nil
		}
		select {
		case <-tick.C:
		case err := <-exited:
			exited <- err
			stop()
			return "", nil, proto.Errorf(proto.DriverError, "diag.dcgm: nv-hostengine exited before it listened (%v): %s", err, tail(stderr.Bytes()))
		case <-deadline.C:
			stop()
			return "", nil, proto.Errorf(proto.DriverError, "diag.dcgm: nv-hostengine did not listen within %s: %s", engineStart, tail(stderr.Bytes()))
		case <-ctx.Done():
			stop()
			return "", nil, proto.Errorf(proto.Timeout, "diag.dcgm: the run's time ran out while nv-hostengine started")
		}
	}
}

// command runs a program in a process group of its own, the whole group killed when
// ctx ends (dcgmi runs nvvs and its plugins as children).
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func (r Runner) root() string { return cmp.Or(r.Root, "/") }

func (r Runner) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

// limited keeps the first maxOutput bytes written to it and drops the rest. The buffer
// is a field, not embedded: io.Copy, which os/exec writes a program's output with,
// would use its ReadFrom and read past Write.
type limited struct{ buf bytes.Buffer }

func (l *limited) Write(p []byte) (int, error) {
	if room := maxOutput - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Bytes is what was kept.
func (l *limited) Bytes() []byte { return l.buf.Bytes() }

// tail is the end of a program's stderr, for an error message.
func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 512 {
		b = b[len(b)-512:]
	}
	if len(b) == 0 {
		return "no stderr"
	}
	return string(b)
}
