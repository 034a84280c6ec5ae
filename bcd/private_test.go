package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/testkit"
)

// TestAgentRefusesAKeyOthersCanRead: an agent whose private key its group or others may
// read does not start: the real bcd names the file and the chmod that fixes it. Made
// private again, the same directory gets past the key (and is refused for its role).
func TestAgentRefusesAKeyOthersCanRead(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	testkit.JSON(t, reg.AdminConfig, nil, "sites", "create", "rack-a")
	dir := testkit.JoinSite(t, reg, "rack-a")
	key := filepath.Join(dir, "agent.key")
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	res := testkit.BCD(t, "node", "--config-dir", dir)
	if res.Code == 0 || !strings.Contains(res.Stderr, key+" is mode 0644") || !strings.Contains(res.Stderr, "chmod 600 "+key) {
		t.Fatalf("bcd node with agent.key 0644: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	os.Chmod(key, 0o600)
	if res := testkit.BCD(t, "node", "--config-dir", dir); res.Code == 0 || !strings.Contains(res.Stderr, "joined as a site agent") {
		t.Fatalf("bcd node with agent.key 0600: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}
