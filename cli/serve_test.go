package cli_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/testkit"
)

// TestServeRemovesLeftoversOfAKilledStart kills a registry, plants the temporary files
// a kill in the middle of writing a key or admin.conf leaves, and starts it again: they
// are gone, and the registry serves with the keys and credential it had.
func TestServeRemovesLeftoversOfAKilledStart(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	reg.Kill()
	leftovers := []string{filepath.Join("pki", ".serving-ca.key.tmp-2718281828"), filepath.Join("pki", ".agent-ca.crt.tmp-1"), ".admin.conf.tmp-42"}
	for _, name := range leftovers {
		if err := os.WriteFile(filepath.Join(reg.DataDir, name), []byte("-----BEGIN PRIVATE KEY-----\nMC4C"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	again := testkit.StartRegistry(t, reg.DataDir)
	for _, name := range leftovers {
		if _, err := os.Stat(filepath.Join(reg.DataDir, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still there after the start: %v", name, err)
		}
	}
	if again.Pins != reg.Pins {
		t.Errorf("pins changed: %+v, then %+v", reg.Pins, again.Pins)
	}
	testkit.JSON(t, again.AdminConfig, nil, "tenants", "list")
}
