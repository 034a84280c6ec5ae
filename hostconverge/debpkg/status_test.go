package debpkg

import (
	"bytes"
	"slices"
	"strings"
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
	got, err := ParseStatus([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// A line too long to read ends the parse with an error rather than cutting the package
// list short: the packages after it would look absent and be installed again.
func TestParseStatusLongLine(t *testing.T) {
	got, err := ParseStatus(longLineStatus())
	if err == nil || !strings.Contains(err.Error(), "line 3 is 1048576 bytes or longer") {
		t.Fatalf("ParseStatus = %v, %v; want the error of line 3", got, err)
	}
}

// longLineStatus is a status file whose first stanza has a description line of 1 MiB.
func longLineStatus() []byte {
	return []byte("Package: a\nStatus: install ok installed\nDescription: " + strings.Repeat("x", maxStatusLine) + "\nVersion: 1-1\n\nPackage: b\nStatus: install ok installed\nVersion: 2-1\n")
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
	f.Add(longLineStatus())
	f.Fuzz(func(t *testing.T, data []byte) {
		pkgs, err := ParseStatus(data)
		if err != nil {
			if !slices.ContainsFunc(bytes.Split(data, []byte("\n")), func(l []byte) bool { return len(l) >= maxStatusLine }) {
				t.Fatalf("error %v without a line of %d bytes or more", err, maxStatusLine)
			}
			return
		}
		for name, version := range pkgs {
			if name == "" || version == "" {
				t.Fatalf("package %q version %q", name, version)
			}
		}
	})
}
