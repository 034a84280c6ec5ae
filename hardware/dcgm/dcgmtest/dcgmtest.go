// Package dcgmtest presents a machine with an NVIDIA GPU to tests of diag.dcgm: the
// GPU's sysfs under a root of the test's own, and the recorded dcgmi outputs of
// hardware/dcgm/testdata.
package dcgmtest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// GPU is the PCI address NvidiaGPU puts the GPU at.
const GPU = "0000:17:00.0"

// NvidiaGPU writes the sysfs of one NVIDIA H100 (a 3D controller of vendor 10de, device
// 2330) at GPU under root.
func NvidiaGPU(t testing.TB, root string) {
	t.Helper()
	dev := filepath.Join(root, "sys/bus/pci/devices", GPU)
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"vendor": "0x10de\n", "device": "0x2330\n", "class": "0x030200\n"} {
		if err := os.WriteFile(filepath.Join(dev, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Recorded is the absolute path of a recorded `dcgmi diag -j` output
// (hardware/dcgm/testdata/NAME; its README says where each came from).
func Recorded(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", name)
}
