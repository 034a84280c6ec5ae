package netns

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// StartVM runs a qemu VM in the switch namespace: TCG, one CPU, no display, the pc
// machine unless args name another (-machine q35), its serial console written to the
// file it returns, and a netdev "n0" on a new tap "tap0" on the
// bridge, which the caller's args attach a NIC to (with memory, UUID, boot order and
// disks). With qmpSock set, the VM serves QMP there, and StartVM returns once the socket
// exists, since a BMC driver dials it next. The VM stops when the test ends; a failed
// test logs qemu's output and the console.
func (l *LAN) StartVM(t testing.TB, qmpSock string, args ...string) (console string) {
	t.Helper()
	l.AddTap(t, "tap0")
	console = filepath.Join(t.TempDir(), "console.log")
	argv := []string{"-accel", "tcg", "-smp", "1", "-display", "none", "-monitor", "none",
		"-serial", "file:" + console, "-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no"}
	if !slices.Contains(args, "-machine") {
		argv = append(argv, "-machine", "pc")
	}
	if qmpSock != "" {
		argv = append(argv, "-qmp", "unix:"+qmpSock+",server=on,wait=off")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := l.Command(ctx, "qemu-system-x86_64", append(argv, args...)...)
	var out SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(console)
			t.Logf("qemu output:\n%s\nconsole:\n%s", out.String(), b)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); qmpSock != ""; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(qmpSock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("qemu made no QMP socket in 30s:\n%s", out.String())
		}
	}
	return console
}
