package ipxe

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const self = "http://10.9.0.1/boot/52-54-00-12-34-56.ipxe"

func TestRenderGolden(t *testing.T) {
	cases := map[string]Script{
		"ramdisk": {Kind: Ramdisk, MAC: "52:54:00:12:34:56", Self: self,
			Kernel: "http://10.9.0.1/ramdisk/vmlinuz", Initrd: "http://10.9.0.1/ramdisk/initrd.img",
			Args:  []string{"console=ttyS0", "bc.token=rt_abc", "bc.registry=https://registry.example:7443", "bc.pins=sha256/AAA+/=,sha256/BBB="},
			Retry: 10 * time.Second},
		"ramdisk-extras": {Kind: Ramdisk, MAC: "52:54:00:12:34:56", Self: self,
			Kernel: "http://10.9.0.1/ramdisk/vmlinuz", Initrd: "http://10.9.0.1/ramdisk/initrd.img",
			Extras: []string{"http://10.9.0.1:8080/images/sha256/" + strings.Repeat("ab", 32), "http://10.9.0.1:8080/images/sha256/" + strings.Repeat("cd", 32)},
			Args:   []string{"console=ttyS0", "bc.token=rt_abc"}, Retry: 10 * time.Second},
		"disk":        {Kind: Disk, MAC: "52:54:00:12:34:56"},
		"sanboot":     {Kind: Sanboot, MAC: "52:54:00:12:34:56", Self: self, ISO: "http://10.9.0.1/cache/sha256/0123abcd", Retry: 5 * time.Second},
		"wait":        {Kind: Wait, MAC: "52:54:00:12:34:56", Self: self, Retry: 10 * time.Second},
		"wait-rebind": {Kind: Wait, MAC: "52:54:00:12:34:56", Self: self, Retry: 10 * time.Second, Rebind: true},
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Render(s)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".ipxe")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("script differs from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

func TestRenderRefusesUnsafeValues(t *testing.T) {
	ok := Script{Kind: Ramdisk, MAC: "52:54:00:12:34:56", Self: self, Kernel: "http://s/k", Initrd: "http://s/i", Args: []string{"a=b"}}
	cases := map[string]struct {
		edit func(*Script)
		path string
	}{
		"newline in an argument":   {func(s *Script) { s.Args = []string{"a=b\nshell"} }, "args[0]"},
		"space in an argument":     {func(s *Script) { s.Args = []string{"a b"} }, "args[0]"},
		"settings expansion":       {func(s *Script) { s.Args = []string{"x=${net0/ip}"} }, "args[0]"},
		"operator in the kernel":   {func(s *Script) { s.Kernel = "http://s/k||shell" }, "kernel"},
		"and operator":             {func(s *Script) { s.Initrd = "http://s/i&&shell" }, "initrd"},
		"carriage return in a URL": {func(s *Script) { s.Kernel = "http://s/k\rshell" }, "kernel"},
		"empty initrd":             {func(s *Script) { s.Initrd = "" }, "initrd"},
		"operator in an extra":     {func(s *Script) { s.Extras = []string{"http://s/x", "http://s/e||shell"} }, "extras[1]"},
		"newline in an extra":      {func(s *Script) { s.Extras = []string{"http://s/e\nshell"} }, "extras[0]"},
		"empty extra":              {func(s *Script) { s.Extras = []string{""} }, "extras[0]"},
		"quote":                    {func(s *Script) { s.Args = []string{`a="b"`} }, "args[0]"},
		"non-ASCII":                {func(s *Script) { s.Args = []string{"é"} }, "args[0]"},
		"unknown kind":             {func(s *Script) { s.Kind = "shell" }, "kind"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := ok
			c.edit(&s)
			_, err := Render(s)
			if !errors.Is(err, &proto.Error{Code: proto.InvalidInput}) {
				t.Fatalf("got %v, want INVALID_INPUT", err)
			}
			if got := proto.AsError(err).Details.Path; got != c.path {
				t.Errorf("path %q, want %q", got, c.path)
			}
		})
	}
}

// FuzzRender checks that whatever an entry holds, a rendered script has exactly the lines
// of its kind: no value can add a line or a command.
func FuzzRender(f *testing.F) {
	f.Add("ramdisk", "http://s/k", "http://s/i", "console=ttyS0", "http://s/iso", "")
	f.Add("sanboot", "http://s/k", "", "", "http://s/iso\nshell", "")
	f.Add("ramdisk", "http://s/k", "http://s/i", "a=${x}", "", "")
	f.Add("ramdisk", "http://s/k", "http://s/i", "a=b", "", "http://s/e\nshell")
	f.Add("ramdisk", "http://s/k", "http://s/i", "a=b", "", "http://s/e")
	f.Add("wait", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, kind, kernel, initrd, arg, iso, extra string) {
		s := Script{Kind: Kind(kind), MAC: "52:54:00:12:34:56", Self: self, Kernel: kernel, Initrd: initrd, Args: []string{arg}, ISO: iso, Retry: time.Second}
		if extra != "" {
			s.Extras = []string{extra}
		}
		out, err := Render(s)
		if err != nil {
			return
		}
		lines := bytes.Count(out, []byte("\n"))
		want := map[Kind]int{Ramdisk: 9 + len(s.Extras), Disk: 3, Sanboot: 7, Wait: 5}[s.Kind]
		if lines != want {
			t.Fatalf("%s script has %d lines, want %d:\n%s", kind, lines, want, out)
		}
		if strings.Count(string(out), "$") != 0 {
			t.Fatalf("script holds a settings expansion:\n%s", out)
		}
	})
}
