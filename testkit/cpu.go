package testkit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clockTicks is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on Linux).
const clockTicks = 100

// ProcessCPU is the CPU time (user and system) process pid has used since it started,
// from /proc/PID/stat: os.Getpid() for the test process itself, a child's pid for a
// process it started (Registry.PID, an etcd member's). Its resolution is 10 ms.
func ProcessCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	d, err := CPUOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// CPUOf is ProcessCPU's reading, with an error where a process that ended has no
// /proc/PID/stat left.
func CPUOf(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read the CPU time of process %d: %w", pid, err)
	}
	// Fields after the command's closing parenthesis (which the command may contain):
	// state is the 3rd field of the line, utime the 14th and stime the 15th.
	i := strings.LastIndexByte(string(stat), ')')
	fields := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q is not what Linux writes", pid, stat)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: CPU time %q: %w", pid, f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// PID is the registry's process id.
func (r *Registry) PID() int { return r.cmd.Process.Pid }

// RSS is process pid's resident memory in bytes (VmRSS of /proc/PID/status).
func RSS(pid int) (int64, error) { return statusBytes(pid, "VmRSS") }

// PeakRSS is the most resident memory process pid has held, in bytes, since it started
// or since ResetPeakRSS (VmHWM of /proc/PID/status).
func PeakRSS(pid int) (int64, error) { return statusBytes(pid, "VmHWM") }

// ResetPeakRSS starts process pid's PeakRSS again from its resident memory now.
func ResetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// statusBytes is the field of /proc/PID/status given in kB, in bytes.
func statusBytes(pid int, field string) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read the memory of process %d: %w", pid, err)
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: %s %q: %w", pid, field, v, err)
			}
			return kib << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}
