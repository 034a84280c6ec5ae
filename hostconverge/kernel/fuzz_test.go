package kernel

import (
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto/hostunit"
)

// The kernel files these parsers read are the host's; a broken or hostile one must not
// make bcd panic or loop.

func FuzzParseCmdline(f *testing.F) {
	for _, s := range []string{"BOOT_IMAGE=/vmlinuz root=UUID=1 ro quiet\n", `a="b c" d`, `"`, "a\tb\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range ParseCmdline(s) {
			if strings.Contains(p, `"`) {
				t.Fatalf("parameter %q keeps a quote", p)
			}
		}
	})
}

func FuzzBracketed(f *testing.F) {
	for _, s := range []string{"always [madvise] never", "[never]", "[[x]]", "[a] [b]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if w, ok := Bracketed(s); ok && (w == "" || strings.ContainsAny(w, " \t\n")) {
			t.Fatalf("Bracketed(%q) = %q", s, w)
		}
	})
}

func FuzzParseRanges(f *testing.F) {
	for _, s := range []string{"0-63,128-191", "0", "", "1-0", "0-65536", "0-8191,0-8191"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ns, err := hostunit.ParseCPURanges(s)
		if err != nil || len(ns) == 0 {
			return
		}
		if len(ns) > hostunit.MaxCPU+1 || slices.Max(ns) > hostunit.MaxCPU {
			t.Fatalf("%q gives %d numbers up to %d", s, len(ns), slices.Max(ns))
		}
		if !slices.IsSorted(ns) {
			return
		}
		unique := slices.Compact(slices.Clone(ns))
		again, err := hostunit.ParseCPURanges(FormatRanges(unique))
		if err != nil || !slices.Equal(again, unique) {
			t.Fatalf("%q does not survive formatting: %v %v", s, again, err)
		}
	})
}

func FuzzParseProcModules(f *testing.F) {
	for _, s := range []string{"nvidia 54947840 120 nvidia_uvm,nvidia_modeset, Live 0x0\nib_umad 40960 0 - Live 0x0\n", "", "\n\n", " x\n", "a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lines := strings.Split(s, "\n")
		for name := range ParseProcModules(s) {
			if name == "" || strings.ContainsAny(name, " \n") {
				t.Fatalf("module name %q", name)
			}
			if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, name+" ") || l == name }) {
				t.Fatalf("%q begins no line", name)
			}
		}
	})
}
