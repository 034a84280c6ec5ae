package nvidia

import (
	"strings"
	"testing"
)

// nvidia-smi's output and the driver's /proc file are the host's; a broken driver or a
// replaced binary must not make bcd panic.

func FuzzParseDriverVersion(f *testing.F) {
	f.Add("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n")
	f.Add("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54  Wed\n")
	f.Fuzz(func(t *testing.T, s string) {
		if v, _, ok := ParseDriverVersion(s); ok && !driverVersion.MatchString(v) {
			t.Fatalf("version %q", v)
		}
	})
}

func FuzzParseGPUInstances(f *testing.F) {
	f.Add("|   0  MIG 3g.40gb          9        2          4:4     |\n+---+\n")
	f.Add("No GPU instances found: Not Found\n")
	f.Fuzz(func(t *testing.T, s string) {
		for gpu, profiles := range ParseGPUInstances(s) {
			if gpu < 0 || gpu > 99 || len(profiles) == 0 {
				t.Fatalf("GPU %d: %v", gpu, profiles)
			}
		}
	})
}

func FuzzParseCSV(f *testing.F) {
	f.Add("0, 700.00, 100.00, 700.00, Enabled, Enabled\n", 6)
	f.Add("0, Disabled, [N/A]\n", 3)
	f.Fuzz(func(t *testing.T, s string, cols int) {
		rows, ok := ParseCSV(s, cols)
		for _, row := range rows {
			if !ok || len(row) != cols {
				t.Fatalf("row %q of %d columns", row, cols)
			}
			for _, field := range row {
				if strings.ContainsAny(field, ",\n") {
					t.Fatalf("field %q", field)
				}
			}
		}
	})
}
