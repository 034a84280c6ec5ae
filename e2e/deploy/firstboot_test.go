package deploy

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/better-compute/better-compute/ramdisk/gpt"
	"github.com/better-compute/better-compute/ramdisk/mount"
	"gopkg.in/yaml.v3"
)

// The environment of the first-boot helper: the test binary runs it when the ramdisk's
// --boot-command starts it with the disk's path.
const (
	envFirstBoot = "BC_E2E_FIRSTBOOT" // the directory the installed OS keeps its files in
	envBCD       = "BC_E2E_BCD"       // the bcd binary
	// envNodeRoot, when set, is the installed OS's root bcd node runs with (a test's
	// sysfs with a GPU in it); else a directory of the first boot's own.
	envNodeRoot = "BC_E2E_NODE_ROOT"
	// envJoinAfter, when set, is a file the first boot waits for before its bcd join: a
	// machine that boots its new OS slower than another host joins with its token.
	envJoinAfter = "BC_E2E_JOIN_AFTER"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envFirstBoot); dir != "" {
		if err := firstBoot(dir, os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, "first boot:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// firstBoot is the written OS's first boot as its cloud-init would run it: the seed on
// the root partition holds the join token and the `bcd join` argv; /etc/bcd holds what
// the ramdisk installed. Paths of the host are moved under dir, then bcd join runs, and
// bcd node replaces this process.
func firstBoot(dir, diskPath string) error {
	f, err := os.OpenFile(diskPath, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	parts, err := gpt.Read(f, 512)
	if err != nil {
		return err
	}
	root, ok := gpt.Root(parts)
	if !ok {
		return fmt.Errorf("no root partition")
	}
	m, err := mount.Partition(f, root.Offset, root.Size)
	if err != nil {
		return err
	}
	userData, err := os.ReadFile(filepath.Join(m.Dir, "var/lib/cloud/seed/nocloud/user-data"))
	if err == nil {
		err = os.CopyFS(filepath.Join(dir, "etc-bcd"), os.DirFS(filepath.Join(m.Dir, "etc/bcd")))
	}
	if uerr := m.Unmount(); err == nil {
		err = uerr
	}
	if err != nil {
		return err
	}
	token, argv, err := parseUserData(string(userData))
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(dir, "join-token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return err
	}
	if hold := os.Getenv(envJoinAfter); hold != "" {
		for _, err := os.Stat(hold); err != nil; _, err = os.Stat(hold) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	bcd := os.Getenv(envBCD)
	conf := filepath.Join(dir, "etc-bcd")
	for i, a := range argv {
		if a == bcdargv.TokenFile {
			argv[i] = tokenFile
		}
	}
	join := exec.Command(bcd, append(argv[1:], "--config-dir", conf)...)
	join.Stdout, join.Stderr = os.Stderr, os.Stderr
	if err := join.Run(); err != nil {
		return fmt.Errorf("%q: %w", argv, err)
	}
	rootDir := os.Getenv(envNodeRoot)
	if rootDir == "" {
		rootDir = filepath.Join(dir, "root")
	}
	if err := os.MkdirAll(rootDir, 0o755); err != nil {
		return err
	}
	if err := newBoot(rootDir); err != nil { // the kexec is a boot of its own
		return err
	}
	return syscall.Exec(bcd, []string{bcd, "node", "--config-dir", conf, "--root", rootDir}, os.Environ())
}

// parseUserData finds the join token and the `bcd join` argv in a cloud-config.
func parseUserData(doc string) (token string, argv []string, err error) {
	var c struct {
		WriteFiles []struct{ Path, Content string } `yaml:"write_files"`
		Runcmd     [][]string                       `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		return "", nil, err
	}
	for _, f := range c.WriteFiles {
		if f.Path == bcdargv.TokenFile {
			token = f.Content
		}
	}
	for _, cmd := range c.Runcmd {
		if len(cmd) > 1 && cmd[0] == bcdargv.Path && cmd[1] == "join" {
			argv = cmd
		}
	}
	if token == "" || argv == nil {
		return "", nil, fmt.Errorf("the user data holds no join token or bcd join:\n%s", doc)
	}
	return token, argv, nil
}

// newBoot writes a new boot id under root, where the agent that boots next reads it
// (/proc/sys/kernel/random/boot_id): each boot of a test machine is one the registry
// tells from a reconnect.
func newBoot(root string) error {
	b := make([]byte, 16)
	rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	p := filepath.Join(root, "proc/sys/kernel/random/boot_id")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, fmt.Appendf(nil, "%x-%x-%x-%x-%x\n", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), 0o644)
}
