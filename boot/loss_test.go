package boot

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTFTPUnderLoss fetches snponly.efi with tftp-hpa, curl and atftp (which negotiates
// an RFC 7440 window of 8 blocks) while the client's namespace drops 1% of the
// datagrams it receives (nftables), and checks that every copy is whole: a lost block
// costs one retransmission timeout, or atftp's acknowledgement of the blocks it holds
// in order, never the transfer.
func TestTFTPUnderLoss(t *testing.T) {
	n := newTestNet(t, "tftp", "curl", "nft", "atftp")
	n.client.Run(t, "ip", "addr", "add", "10.99.0.250/24", "dev", clientIf)
	n.client.Run(t, "nft", "add", "table", "inet", "loss")
	n.client.Run(t, "nft", "add chain inet loss in { type filter hook input priority 0; }")
	n.client.Run(t, "nft", "add rule inet loss in udp sport != 69 numgen random mod 100 < 1 drop")
	want, err := os.ReadFile(filepath.Join(ipxeDir, "snponly.efi"))
	if err != nil {
		t.Fatal(err)
	}
	startServer(t, n.server, netConfig(t, Proxy), nil)
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"tftp-hpa", []string{"tftp", "-m", "binary", serverAddr, "-c", "get", "snponly.efi", filepath.Join(dir, "tftp-hpa")}},
		{"curl", []string{"curl", "-sS", "--tftp-blksize", "1468", "-o", filepath.Join(dir, "curl"), "tftp://" + serverAddr + "/snponly.efi"}},
		{"atftp", []string{"atftp", "--option", "windowsize 8", "--option", "blksize 1468", "--get", "-r", "snponly.efi", "-l", filepath.Join(dir, "atftp"), serverAddr}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		start := time.Now()
		out, err := n.client.Command(ctx, c.argv[0], c.argv[1:]...).CombinedOutput()
		cancel()
		got, _ := os.ReadFile(filepath.Join(dir, c.name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %v, %d of %d bytes\n%s", c.name, err, len(got), len(want), out)
			continue
		}
		t.Logf("%s: %d KiB in %v at 1%% loss", c.name, len(want)>>10, time.Since(start).Round(time.Millisecond))
	}
}
