package grub

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot/ipxe"
	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const (
	base = "http://10.9.0.1"
	mac  = "52:54:00:12:34:56"
)

// tftp serves the files below base's /ramdisk/ at the same path.
func tftp(url string) (string, bool) {
	name, ok := strings.CutPrefix(url, base+"/ramdisk/")
	return "/ramdisk/" + name, ok
}

func TestRenderGolden(t *testing.T) {
	cases := map[string]ipxe.Script{
		"ramdisk": {Kind: ipxe.Ramdisk, MAC: mac, Kernel: base + "/ramdisk/vmlinuz", Initrd: base + "/ramdisk/initrd.img",
			Args:  []string{"console=ttyS0", "bc.registry=https://registry.example:7443", "bc.pins=sha256/AAA+/=,sha256/BBB=", "bc.token=rt_abc"},
			Retry: 10 * time.Second},
		"ramdisk-extras": {Kind: ipxe.Ramdisk, MAC: mac, Kernel: base + "/ramdisk/vmlinuz", Initrd: base + "/ramdisk/initrd.img",
			Extras: []string{base + "/ramdisk/extra.img"}, Args: []string{"bc.token=rt_abc"}, Retry: 10 * time.Second},
		"disk": {Kind: ipxe.Disk, MAC: mac},
		"wait": {Kind: ipxe.Wait, MAC: mac, Retry: 10 * time.Second},
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Render(s, tftp)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".cfg")
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
				t.Errorf("configuration differs from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

func TestRenderRefuses(t *testing.T) {
	ok := ipxe.Script{Kind: ipxe.Ramdisk, MAC: mac, Kernel: base + "/ramdisk/k", Initrd: base + "/ramdisk/i", Args: []string{"a=b"}}
	cases := map[string]struct {
		edit func(*ipxe.Script)
		path string
	}{
		"command separator":         {func(s *ipxe.Script) { s.Args = []string{"a=b;reboot"} }, "args[0]"},
		"newline":                   {func(s *ipxe.Script) { s.Args = []string{"a=b\nreboot"} }, "args[0]"},
		"variable expansion":        {func(s *ipxe.Script) { s.Args = []string{"x=${prefix}"} }, "args[0]"},
		"block":                     {func(s *ipxe.Script) { s.Args = []string{"{"} }, "args[0]"},
		"comment":                   {func(s *ipxe.Script) { s.Args = []string{"#x"} }, "args[0]"},
		"quote":                     {func(s *ipxe.Script) { s.Args = []string{"a='b'"} }, "args[0]"},
		"pipe in the kernel path":   {func(s *ipxe.Script) { s.Kernel = base + "/ramdisk/k|x" }, "kernel"},
		"device in the initrd":      {func(s *ipxe.Script) { s.Initrd = base + "/(memdisk)/i" }, "initrd"},
		"kernel of another host":    {func(s *ipxe.Script) { s.Kernel = "http://10.9.0.2/ramdisk/k" }, "kernel"},
		"extra from the site cache": {func(s *ipxe.Script) { s.Extras = []string{base + "/images/sha256/ab"} }, "extras[0]"},
		"https kernel":              {func(s *ipxe.Script) { s.Kernel = "https://10.9.0.1/ramdisk/k" }, "kernel"},
		"empty initrd":              {func(s *ipxe.Script) { s.Initrd = "" }, "initrd"},
		"bad MAC":                   {func(s *ipxe.Script) { s.MAC = "52:54;reboot" }, "mac"},
		"sanboot":                   {func(s *ipxe.Script) { s.Kind = ipxe.Sanboot; s.ISO = base + "/x.iso" }, "kind"},
		"unknown kind":              {func(s *ipxe.Script) { s.Kind = "shell" }, "kind"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := ok
			c.edit(&s)
			_, err := Render(s, tftp)
			if !errors.Is(err, &proto.Error{Code: proto.InvalidInput}) {
				t.Fatalf("got %v, want INVALID_INPUT", err)
			}
			if got := proto.AsError(err).Details.Path; got != c.path {
				t.Errorf("path %q, want %q", got, c.path)
			}
		})
	}
}

// FuzzRender checks that whatever an entry holds, a rendered configuration has exactly
// the lines of its kind and no character GRUB's language gives a meaning to outside
// the lines Render writes itself.
func FuzzRender(f *testing.F) {
	f.Add("ramdisk", base+"/ramdisk/k", base+"/ramdisk/i", "console=ttyS0", "")
	f.Add("ramdisk", base+"/ramdisk/k", base+"/ramdisk/i", "a=${x}", "")
	f.Add("ramdisk", base+"/ramdisk/k", base+"/ramdisk/i", "a=b", base+"/ramdisk/e\nreboot")
	f.Add("ramdisk", base+"/ramdisk/k", base+"/ramdisk/i", "a=b", base+"/ramdisk/e")
	f.Add("wait", "", "", "", "")
	f.Add("disk", "", "", "", "")
	f.Fuzz(func(t *testing.T, kind, kernel, initrd, arg, extra string) {
		s := ipxe.Script{Kind: ipxe.Kind(kind), MAC: mac, Kernel: kernel, Initrd: initrd, Args: []string{arg}, Retry: time.Second}
		if extra != "" {
			s.Extras = []string{extra}
		}
		out, err := Render(s, tftp)
		if err != nil {
			return
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		want := map[ipxe.Kind]int{ipxe.Ramdisk: 7, ipxe.Disk: 2, ipxe.Wait: 4}[s.Kind]
		if len(lines) != want {
			t.Fatalf("%s configuration has %d lines, want %d:\n%s", kind, len(lines), want, out)
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "echo '") || strings.HasPrefix(l, "#") {
				continue
			}
			if i := bytes.IndexAny([]byte(l), "$;|&<>{}()'\"\\`#"); i >= 0 {
				t.Fatalf("line %q holds %q:\n%s", l, l[i], out)
			}
		}
	})
}
