package netns

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// StartDhclient runs ISC dhclient in n on ifname, in the foreground, until the test ends:
// script is the text of its dhclient-script (which must configure what the test needs, and
// nothing of the host's), and its configuration, lease and pid files are the test's own.
// Its output is logged when the test failed.
func (n *NS) StartDhclient(t testing.TB, ifname, script string) {
	t.Helper()
	n.StartDhclientLeases(t, ifname, script, filepath.Join(t.TempDir(), "leases"))
}

// StartDhclientLeases is StartDhclient with leases as its lease file, which a dhclient
// started again with it reads: it asks again for the address it had (INIT-REBOOT), as a
// machine that reboots does. stop kills it, without a DHCPRELEASE, and waits for it;
// the test's end calls it too.
func (n *NS) StartDhclientLeases(t testing.TB, ifname, script, leases string) (stop func()) {
	t.Helper()
	dir := t.TempDir()
	path, conf := filepath.Join(dir, "script"), filepath.Join(dir, "dhclient.conf")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := n.Command(ctx, "dhclient", "-4", "-d", "-v", "-cf", conf, "-lf", leases,
		"-pf", filepath.Join(dir, "pid"), "-sf", path, ifname)
	var log SyncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceFunc(func() {
		cancel()
		cmd.Wait()
	})
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("dhclient:\n%s", log.String())
		}
	})
	return stop
}
