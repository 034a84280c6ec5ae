// Package netns builds throwaway network namespaces for tests that run real clients and
// servers (DHCP, TFTP, HTTP, qemu): a switch namespace holding a bridge, and member
// namespaces attached to it by veth pairs. Every address lives inside these namespaces,
// so nothing a test sends reaches the host's networks. Tests skip, saying why, when they
// do not run as root or a tool is missing.
package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Require skips the test unless it runs as root and every tool is on PATH.
func Require(t testing.TB, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces (CI runs as root)")
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s on PATH (.ci/deps.sh installs it)", tool)
		}
	}
}

// AloneEnv is the variable under which the tests that fill a table every namespace shares
// run: `make test` sets it for a run of their packages (AlonePackages in the Makefile)
// after every other test has ended.
const AloneEnv = "BC_NETNS_ALONE"

// RequireAlone skips the test unless it runs alone (AloneEnv is set) and Require's
// conditions hold. It is for a test that fills the host's neighbour table, one table for
// every namespace (its limit, gc_thresh3, is the host's): while it is full, other tests'
// namespaces cannot resolve a new neighbour, so such a test must not run beside them.
func RequireAlone(t testing.TB, tools ...string) {
	t.Helper()
	if os.Getenv(AloneEnv) == "" {
		t.Skipf("fills the host's neighbour table, which other tests' namespaces share: make test runs it alone, after the others (%s=1)", AloneEnv)
	}
	Require(t, tools...)
}

// NS is a network namespace that lives until the test ends.
type NS struct {
	Name string
}

// New makes a namespace with its loopback up, deleted when the test ends.
func New(t testing.TB, role string) *NS {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	n := &NS{Name: "bc-" + role + "-" + hex.EncodeToString(b)}
	run(t, "ip", "netns", "add", n.Name)
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", n.Name).Run() })
	n.Run(t, "ip", "link", "set", "lo", "up")
	return n
}

// Command is name args... run inside the namespace.
func (n *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Do runs fn in this process, on a thread of its own inside the namespace: the sockets
// fn opens are the namespace's, as a process Command starts there would open them. fn
// must not start goroutines that open sockets. The thread leaves the namespace after fn
// (or ends, when it cannot).
func (n *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer home.Close()
		target, err := os.Open("/run/netns/" + n.Name)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering namespace %s: %w", n.Name, err)
			return
		}
		err = fn()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// Run runs a command inside the namespace and returns its output, failing the test when
// it fails.
func (n *NS) Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	return run(t, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// LAN is one Ethernet segment: a bridge in a namespace of its own.
type LAN struct {
	*NS
	links int
}

// NewLAN makes a switch namespace with a bridge "br0" up in it.
func NewLAN(t testing.TB) *LAN {
	t.Helper()
	l := &LAN{NS: New(t, "lan")}
	l.Run(t, "ip", "link", "add", "br0", "type", "bridge")
	l.Run(t, "ip", "link", "set", "br0", "up")
	return l
}

// Attach joins member to the segment with a veth pair: the end in member is named ifname
// and gets cidr (none when empty) and mac (the kernel's choice when empty).
func (l *LAN) Attach(t testing.TB, member *NS, ifname, cidr, mac string) {
	t.Helper()
	l.links++
	port := fmt.Sprintf("p%d", l.links)
	l.Run(t, "ip", "link", "add", port, "type", "veth", "peer", "name", ifname, "netns", member.Name)
	l.Run(t, "ip", "link", "set", port, "master", "br0", "up")
	if mac != "" {
		member.Run(t, "ip", "link", "set", ifname, "address", mac)
	}
	if cidr != "" {
		member.Run(t, "ip", "addr", "add", cidr, "dev", ifname)
	}
	member.Run(t, "ip", "link", "set", ifname, "up")
}

// AddTap makes a tap device for a VM in the switch namespace, on the bridge; qemu must
// run inside the switch namespace to open it.
func (l *LAN) AddTap(t testing.TB, name string) {
	t.Helper()
	l.Run(t, "ip", "tuntap", "add", name, "mode", "tap")
	l.Run(t, "ip", "link", "set", name, "master", "br0", "up")
}
