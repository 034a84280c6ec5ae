//go:build linux

package hostconverge

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/better-compute/better-compute/hostconverge/kernel"
	"github.com/better-compute/better-compute/proto"
)

// helperEnv names the check TestNamespaceHelper runs inside the namespaces a test made
// for it.
const helperEnv = "BC_HOSTCONVERGE_HELPER"

// inNamespaces runs check in a child process of this test binary with its own network
// and mount namespaces, and fails with the child's output when the child fails.
func inNamespaces(t *testing.T, check string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network and mount namespaces (CI runs as root)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNamespaceHelper$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+check)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in its namespaces: %v\n%s", check, err, out)
	}
	if bytes.Contains(out, []byte("--- SKIP")) {
		t.Skipf("%s", lastSkip(out))
	}
}

func lastSkip(out []byte) string {
	var reason string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.Contains(line, ".go:") {
			reason = line
		}
	}
	return reason
}

// TestNamespaceHelper is the child of inNamespaces; run by itself it does nothing.
func TestNamespaceHelper(t *testing.T) {
	check := os.Getenv(helperEnv)
	if check == "" {
		t.Skip("the child process of the namespace tests")
	}
	// Mounts made here stay in this namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		t.Fatalf("making mounts private: %v", err)
	}
	switch check {
	case "sysctl":
		helperSysctl(t)
	case "modules":
		helperModules(t)
	case "readonly":
		helperReadOnly(t)
	default:
		t.Fatalf("unknown check %q", check)
	}
}

// hideEtc mounts an empty tmpfs over /etc, so that the files a real pass writes there
// stay in this namespace.
func hideEtc(t *testing.T) {
	if err := syscall.Mount("tmpfs", "/etc", "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mounting a tmpfs on /etc: %v", err)
	}
}

// TestRealSysctl applies net.* sysctls with root / and the exec runner inside a network
// namespace, where they are the namespace's own, and reads them back from /proc/sys.
func TestRealSysctl(t *testing.T) {
	before := readProc(t, "/proc/sys/net/core/somaxconn")
	inNamespaces(t, "sysctl")
	if after := readProc(t, "/proc/sys/net/core/somaxconn"); after != before {
		t.Errorf("the test's own namespace changed: somaxconn %s -> %s", before, after)
	}
}

func helperSysctl(t *testing.T) {
	hideEtc(t)
	c := &Converger{Root: "/", Runner: ExecRunner{}}
	spec := Spec{Generation: 1, Units: []Unit{{Name: "sysctl", Settings: []byte(`{"net.ipv4.ip_forward": true, "net.core.somaxconn": 1234}`)}}}
	first := c.Converge(context.Background(), spec)
	if first[0].Status != Changed {
		t.Fatalf("first pass: %+v", first)
	}
	if got := readProc(t, "/proc/sys/net/ipv4/ip_forward") + " " + readProc(t, "/proc/sys/net/core/somaxconn"); got != "1 1234" {
		t.Errorf("the kernel reads back %q, want \"1 1234\"", got)
	}
	if conf := readProc(t, kernel.SysctlConf); !strings.Contains(conf, "net.core.somaxconn = 1234") {
		t.Errorf("%s holds %q", kernel.SysctlConf, conf)
	}
	if second := c.Converge(context.Background(), spec); second[0].Status != Converged {
		t.Errorf("second pass: %+v", second)
	}
}

// TestRealModules loads a harmless library module with modprobe and finds it in
// /proc/modules, where the kernel can load modules and has one not loaded yet.
func TestRealModules(t *testing.T) {
	inNamespaces(t, "modules")
}

func helperModules(t *testing.T) {
	if _, err := os.Stat(kernel.ProcModules); err != nil {
		t.Skip("the kernel has no loadable module support (/proc/modules is missing)")
	}
	if _, err := exec.LookPath("modprobe"); err != nil {
		t.Skip("modprobe is not installed (.ci/deps.sh installs kmod)")
	}
	release := readProc(t, "/proc/sys/kernel/osrelease")
	dep, err := os.ReadFile(filepath.Join("/lib/modules", release, "modules.dep"))
	if err != nil {
		t.Skipf("no modules.dep for kernel %s: %v", release, err)
	}
	loaded := kernel.ParseProcModules(readProc(t, kernel.ProcModules))
	module := ""
	for _, candidate := range []string{"crc7", "crc_itu_t", "crc8", "ts_kmp", "ts_bm"} {
		file := "/" + strings.ReplaceAll(candidate, "_", "-") + ".ko"
		if !loaded[candidate] && (bytes.Contains(dep, []byte(file)) || bytes.Contains(dep, []byte("/"+candidate+".ko"))) {
			module = candidate
			break
		}
	}
	if module == "" {
		t.Skip("none of the harmless modules crc7, crc_itu_t, crc8, ts_kmp, ts_bm is available and unloaded")
	}
	hideEtc(t)
	t.Cleanup(func() { exec.Command("modprobe", "-r", module).Run() })
	c := &Converger{Root: "/", Runner: ExecRunner{}}
	results := c.Converge(context.Background(), Spec{Units: []Unit{{Name: "kernel-modules", Settings: []byte(`{"load": ["` + module + `"]}`)}}})
	if results[0].Status != Changed {
		t.Fatalf("pass: %+v", results)
	}
	if !kernel.ParseProcModules(readProc(t, kernel.ProcModules))[module] {
		t.Errorf("%s is not in /proc/modules after the pass", module)
	}
}

// TestReadOnlyRoot converges a host tree whose /etc is a read-only bind mount: the units
// writing there fail with the file system's reason and leave the files there as they
// were, and the other units still run.
func TestReadOnlyRoot(t *testing.T) {
	inNamespaces(t, "readonly")
}

func helperReadOnly(t *testing.T) {
	old := "# an older file\nvm.swappiness = 30\n"
	h := newFakeHost(t, with(kernelHost(), map[string]string{kernel.SysctlConf: old}), nil)
	etc := filepath.Join(h.root, "etc")
	if err := syscall.Mount(etc, etc, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting %s: %v", etc, err)
	}
	t.Cleanup(func() { syscall.Unmount(etc, 0) })
	if err := syscall.Mount("", etc, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remounting %s read-only: %v", etc, err)
	}
	before := h.snapshot()
	c := &Converger{Root: h.root, Runner: h}
	results := c.Converge(context.Background(), Spec{Units: []Unit{
		{Name: "sysctl", Settings: []byte(`{"vm.swappiness": 10}`)},
		{Name: "kernel-modules", Settings: []byte(`{"load": ["ipmi_devintf"]}`)},
		{Name: "hugepages", Settings: []byte(`{"perNuma": {"0": {"pages2m": 64}}}`)},
	}})
	want := []brief{{"kernel-modules", Failed, proto.DriverError, false}, {"sysctl", Failed, proto.DriverError, false}, {"hugepages", Changed, "", false}}
	if diff := cmp.Diff(want, briefs(results)); diff != "" {
		t.Fatalf("results (-want +got):\n%s\n%+v", diff, results)
	}
	if !strings.Contains(results[1].Message, "read-only file system") || !slices.Contains(results[1].Corrections, "set vm.swappiness 60 -> 10") {
		t.Errorf("sysctl: %+v; want the file system's reason, and the live value set", results[1])
	}
	diff := fileDiff(before, h.snapshot())
	if strings.Contains(diff, "/etc/") {
		t.Errorf("files under the read-only /etc changed:\n%s", diff)
	}
}

func readProc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
