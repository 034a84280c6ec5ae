package kernel

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/hostconverge/hostenv"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// TestSysctlRefusesAtApply: settings that did not come through Decode are checked again,
// and a refused value stops the unit before it writes anything.
func TestSysctlRefusesAtApply(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc/sys/vm"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/sys/vm/swappiness"), []byte("60\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := hostenv.NewPass(hostenv.Env{Root: root})
	err := Sysctl(context.Background(), p, &hostunit.Sysctl{Values: map[string]string{"vm.swappiness": "10", "kernel.core_pattern": "|/tmp/x %p"}})
	if proto.CodeOf(err) != proto.InvalidConfig {
		t.Fatalf("error %v, want INVALID_CONFIG", err)
	}
	if len(p.Corrections()) > 0 {
		t.Errorf("corrections %q before the refusal", p.Corrections())
	}
	if _, err := os.Stat(filepath.Join(root, SysctlConf)); !os.IsNotExist(err) {
		t.Errorf("%s was written: %v", SysctlConf, err)
	}
}
