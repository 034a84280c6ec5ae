package qmp

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/better-compute/better-compute/bmc"
)

// vm is a qemu VM started for a test: no OS, SeaBIOS writing its log (each boot's
// "Booting from ...") to a file through the debug console.
type vm struct {
	socket  string
	biosLog string
}

// startVM starts a q35 VM, held before its first instruction (-S), with a NIC (nic0),
// a blank 1 MiB disk (disk0) and an empty CD drive (cd0). It skips the test when qemu
// is not installed.
func startVM(t *testing.T, extra ...string) *vm {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 is not installed (Debian package qemu-system-x86, installed by .ci/deps.sh)")
	}
	// A short directory: a unix socket's path is limited to 107 bytes.
	dir, err := os.MkdirTemp("", "bc-qmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	v := &vm{socket: filepath.Join(dir, "qmp.sock"), biosLog: filepath.Join(dir, "seabios.log")}
	args := append([]string{
		"-M", "q35", "-accel", "tcg", "-m", "64", "-display", "none", "-nodefaults", "-S", "-no-shutdown",
		"-qmp", "unix:" + v.socket + ",server=on,wait=off",
		"-chardev", "file,id=bios,path=" + v.biosLog, "-device", "isa-debugcon,iobase=0x402,chardev=bios",
		"-device", "e1000,id=nic0,mac=52:54:00:aa:bb:cc",
		"-blockdev", "driver=null-co,node-name=blank,size=1048576,read-zeroes=on", "-device", "virtio-blk-pci,drive=blank,id=disk0",
		"-device", "ide-cd,id=cd0,bus=ide.0",
	}, extra...)
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// The socket exists from bind(); qemu answers once it listens.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := dial(context.Background(), v.socket); err == nil {
			c.close()
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("qemu made no QMP socket: %s", stderr.String())
		}
	}
}

// config binds the VM with every boot device and fast polling.
func (v *vm) config() bmc.Config {
	return bmc.Config{Address: "unix:" + v.socket, Options: map[string]string{
		optNIC: "nic0", optDisk: "disk0", optCD: "cd0", "pollInterval": "20ms", "powerTimeout": "1s",
	}}
}

func (v *vm) open(t *testing.T, cfg bmc.Config) bmc.Driver {
	t.Helper()
	d, err := Open(context.Background(), cfg, bmc.Env{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// run executes one QMP command on the VM, for the test's own checks.
func (v *vm) run(t *testing.T, command string, args, result any) {
	t.Helper()
	c, err := dial(context.Background(), v.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if err := c.execute(command, args, result); err != nil {
		t.Fatalf("%s: %v", command, err)
	}
}

func (v *vm) runState(t *testing.T) string {
	var st struct{ Status string }
	v.run(t, "query-status", nil, &st)
	return st.Status
}

func (v *vm) bootIndexes(t *testing.T) map[string]int {
	got := map[string]int{}
	for _, id := range []string{"nic0", "disk0", "cd0"} {
		var i int
		v.run(t, "qom-get", map[string]any{"path": peripheral(id), "property": "bootindex"}, &i)
		got[id] = i
	}
	return got
}

var (
	biosBanner = regexp.MustCompile(`SeaBIOS \(version `)
	bootingRe  = regexp.MustCompile(`Booting from ([^.\r\n]+)\.\.\.`)
)

// waitBoots waits until SeaBIOS has tried to boot n times and returns the first device
// each boot tried.
func (v *vm) waitBoots(t *testing.T, n int) []string {
	t.Helper()
	var firsts []string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		data, _ := os.ReadFile(v.biosLog)
		firsts = firsts[:0]
		for _, boot := range biosBanner.Split(string(data), -1) {
			if m := bootingRe.FindStringSubmatch(boot); m != nil {
				firsts = append(firsts, m[1])
			}
		}
		if len(firsts) >= n {
			return firsts
		}
	}
	t.Fatalf("SeaBIOS tried %d boots, want %d: %q", len(firsts), n, firsts)
	return nil
}
