package netns

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// StartDhclient runs ISC dhclient in n on ifname, in the foreground, until the test ends:
// script is the text of its dhclient-script (which must configure what the test needs, and
// nothing of the host's), and its configuration, lease and pid files are the test's own.
// Its output is logged when the test failed.
func (n *NS) StartDhclient(t testing.TB, ifname, script string) {
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
	cmd := n.Command(ctx, "dhclient", "-4", "-d", "-v", "-cf", conf, "-lf", filepath.Join(dir, "leases"),
		"-pf", filepath.Join(dir, "pid"), "-sf", path, ifname)
	var log SyncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("dhclient:\n%s", log.String())
		}
	})
}
