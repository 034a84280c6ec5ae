package boot

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestTFTPWindowWithRealClients fetches ipxe.efi with tftp-hpa and with curl from servers
// of several sender windows and checks that every copy is whole. pin/tftp's window is
// not RFC 7440's windowsize option: it sends the blocks of a window without being asked
// for them, and neither client negotiates a window. The timings it logs are what
// docs/boot.md reports.
func TestTFTPWindowWithRealClients(t *testing.T) {
	n := newTestNet(t, "tftp", "curl")
	n.client.Run(t, "ip", "addr", "add", "10.99.0.250/24", "dev", clientIf)
	// Debian's /usr/lib/ipxe/ipxe.efi is a link to /boot/ipxe.efi, outside the directory,
	// which the server refuses to follow: serve a copy.
	root := t.TempDir()
	want, err := os.ReadFile(filepath.Join(ipxeDir, "ipxe.efi"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ipxe.efi"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, window := range []int{1, 4, 16} {
		t.Run("window "+strconv.Itoa(window), func(t *testing.T) {
			cfg := netConfig(t, Proxy)
			cfg.TFTPWindow = window
			cfg.IPXEDir = root
			startServer(t, n.server, cfg, nil)
			dir := t.TempDir()
			clients := map[string][]string{
				"tftp-hpa":          {"tftp", "-m", "binary", serverAddr, "-c", "get", "ipxe.efi", filepath.Join(dir, "tftp-hpa")},
				"curl blksize 512":  {"curl", "-sS", "--tftp-blksize", "512", "-o", filepath.Join(dir, "curl blksize 512"), "tftp://" + serverAddr + "/ipxe.efi"},
				"curl blksize 1468": {"curl", "-sS", "--tftp-blksize", "1468", "-o", filepath.Join(dir, "curl blksize 1468"), "tftp://" + serverAddr + "/ipxe.efi"},
			}
			for _, name := range []string{"tftp-hpa", "curl blksize 512", "curl blksize 1468"} {
				argv := clients[name]
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				start := time.Now()
				out, err := n.client.Command(ctx, argv[0], argv[1:]...).CombinedOutput()
				took := time.Since(start)
				cancel()
				got, _ := os.ReadFile(filepath.Join(dir, name))
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s: %v, %d of %d bytes\n%s", name, err, len(got), len(want), out)
					continue
				}
				t.Logf("window %2d, %-17s %4d KiB in %v (%.1f MiB/s)", window, name, len(want)>>10, took.Round(time.Millisecond), float64(len(want))/took.Seconds()/(1<<20))
			}
		})
	}
}
