package debpkg

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseStatus(t *testing.T) {
	status := `Package: nvidia-driver-580-open
Status: install ok installed
Priority: optional
Version: 580.95.05-0ubuntu1
Description: NVIDIA driver metapackage
 This metapackage depends on the NVIDIA driver.
 .
 Version: 1.0 (a continuation line, not a field)

Package: kubelet
Status: hold ok installed
Version: 1.34.1-1.1

Package: nvidia-driver-570
Status: deinstall ok config-files
Version: 570.172.08-0ubuntu1

Package: half-installed
Status: install reinstreq half-installed
Version: 1-1`
	want := map[string]string{"nvidia-driver-580-open": "580.95.05-0ubuntu1", "kubelet": "1.34.1-1.1"}
	if diff := cmp.Diff(want, ParseStatus([]byte(status))); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestUpstream(t *testing.T) {
	for in, want := range map[string]string{
		"580.95.05-0ubuntu1":   "580.95.05",
		"1:580.95.05-0ubuntu1": "580.95.05",
		"1.34.1-1.1":           "1.34.1",
		"2.36":                 "2.36",
		"1.2-3-4":              "1.2-3",
	} {
		if got := Upstream(in); got != want {
			t.Errorf("Upstream(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("Package: a\nStatus: install ok installed\nVersion: 1-1\n\nPackage: b\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for name, version := range ParseStatus(data) {
			if name == "" || version == "" {
				t.Fatalf("package %q version %q", name, version)
			}
		}
	})
}
