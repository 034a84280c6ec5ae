package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestRemoveStaleBinaries: the binaries' folder of a test process that has ended is
// removed, as is one of the old naming a day old; this process's own, a live process's
// and a recent one of the old naming stay.
func TestRemoveStaleBinaries(t *testing.T) {
	dir := t.TempDir()
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Process.Kill(); live.Wait() })
	folder := func(name string, age time.Duration) string {
		f := filepath.Join(dir, name)
		if err := os.Mkdir(f, 0o700); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(f, at, at); err != nil {
			t.Fatal(err)
		}
		return f
	}
	gone := []string{
		folder(fmt.Sprintf("%s%d-1", binPrefix, ended.Process.Pid), 0),
		folder(binPrefix+"123456789", 25*time.Hour),
	}
	kept := []string{
		folder(fmt.Sprintf("%s%d-2", binPrefix, os.Getpid()), 0),
		folder(fmt.Sprintf("%s%d-3", binPrefix, live.Process.Pid), 0),
		folder(binPrefix+"987654321", time.Hour),
		folder("other-1", 48*time.Hour),
	}
	removeStaleBinaries(dir)
	for _, f := range gone {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s stayed (%v), want it removed", filepath.Base(f), err)
		}
	}
	for _, f := range kept {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v, want it kept", filepath.Base(f), err)
		}
	}
}
