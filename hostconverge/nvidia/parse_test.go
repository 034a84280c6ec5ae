package nvidia

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDriverVersion(t *testing.T) {
	tests := map[string]struct {
		in      string
		version string
		open    bool
		ok      bool
	}{
		"open":        {"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16)  Tue Sep 23 2025\nGCC version: 13\n", "580.95.05", true, true},
		"proprietary": {"NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Wed Jul  2 2025\n", "570.172.08", false, true},
		"two parts":   {"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54  Wed\n", "535.54", false, true},
		"no version":  {"NVRM version: NVIDIA UNIX x86_64 Kernel Module\n", "", false, false},
		"no NVRM":     {"GCC version: 13\n", "", false, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			v, open, ok := ParseDriverVersion(tc.in)
			if v != tc.version || open != tc.open || ok != tc.ok {
				t.Errorf("got %q %v %v, want %q %v %v", v, open, ok, tc.version, tc.open, tc.ok)
			}
		})
	}
}

func TestParseGPUInstances(t *testing.T) {
	out := `+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 3g.40gb          9        2          4:4     |
+-------------------------------------------------------+
|   1  MIG 1g.10gb+me      20        7          0:1     |
+-------------------------------------------------------+
|   0  MIG 2g.20gb         14        3          0:2     |
+-------------------------------------------------------+
`
	want := map[int][]string{0: {"2g.20gb", "3g.40gb"}, 1: {"1g.10gb+me"}}
	if diff := cmp.Diff(want, ParseGPUInstances(out)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := ParseGPUInstances("No GPU instances found: Not Found\n"); len(got) != 0 {
		t.Errorf("none found: %v", got)
	}
}

func TestParseCSV(t *testing.T) {
	tests := map[string]struct {
		in   string
		cols int
		want [][]string
		ok   bool
	}{
		"rows":        {"0, 700.00, Enabled\n1, [N/A], Disabled\n", 3, [][]string{{"0", "700.00", "Enabled"}, {"1", "[N/A]", "Disabled"}}, true},
		"blank lines": {"\n0, a\n\n", 2, [][]string{{"0", "a"}}, true},
		"short row":   {"0, a\n1\n", 2, nil, false},
		"none":        {"", 2, nil, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ParseCSV(tc.in, tc.cols)
			if diff := cmp.Diff(tc.want, got); diff != "" || ok != tc.ok {
				t.Errorf("ok %v (-want +got):\n%s", ok, diff)
			}
		})
	}
}
