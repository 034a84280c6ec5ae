package kernel

import (
	"slices"
	"testing"

	"github.com/better-compute/better-compute/proto/hostunit"
	"github.com/google/go-cmp/cmp"
)

func TestParseCmdline(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []string
	}{
		"plain":          {"BOOT_IMAGE=/vmlinuz root=UUID=1 ro quiet\n", []string{"BOOT_IMAGE=/vmlinuz", "root=UUID=1", "ro", "quiet"}},
		"quoted value":   {`a="b c" d`, []string{"a=b c", "d"}},
		"quoted word":    {`"x y"`, []string{"x y"}},
		"empty quotes":   {`a="" b`, []string{"a=", "b"}},
		"unclosed quote": {`a="b c`, []string{"a=b c"}},
		"tabs and runs":  {"a\t\tb   c", []string{"a", "b", "c"}},
		"empty":          {"", nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ParseCmdline(tc.in)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestBracketed(t *testing.T) {
	tests := map[string]struct {
		in   string
		want string
		ok   bool
	}{
		"middle":    {"always [madvise] never\n", "madvise", true},
		"first":     {"[always] madvise never", "always", true},
		"none":      {"always madvise never", "", false},
		"two":       {"[always] [never]", "", false},
		"empty":     {"[] never", "", false},
		"unclosed":  {"[always madvise", "", false},
		"only word": {"[never]", "never", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := Bracketed(tc.in)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Bracketed(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestFormatRanges: a CPU list the kernel writes is written back as it was.
func TestFormatRanges(t *testing.T) {
	for _, list := range []string{"0-3,8,10-11", "0", "1,3,5", "8190-8191", "0-8191"} {
		cpus, err := hostunit.ParseCPURanges(list)
		if err != nil {
			t.Fatal(err)
		}
		if got := FormatRanges(cpus); got != list {
			t.Errorf("FormatRanges(%v) = %q, want %q", cpus, got, list)
		}
	}
}

func TestSysctlNames(t *testing.T) {
	tests := map[string]struct{ path, conf string }{
		"vm.swappiness":                    {"/proc/sys/vm/swappiness", "vm.swappiness"},
		"net.ipv4.conf.eth0/100.rp_filter": {"/proc/sys/net/ipv4/conf/eth0.100/rp_filter", "net/ipv4/conf/eth0.100/rp_filter"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := SysctlPath(name); got != tc.path {
				t.Errorf("SysctlPath = %q, want %q", got, tc.path)
			}
			if got := confName(name); got != tc.conf {
				t.Errorf("confName = %q, want %q", got, tc.conf)
			}
		})
	}
}

func TestParseProcModules(t *testing.T) {
	got := ParseProcModules("nvidia_uvm 1900544 0 - Live 0x0000000000000000 (POE)\nnvidia 54947840 1 nvidia_uvm, Live 0x0 (POE)\n")
	if want := map[string]bool{"nvidia_uvm": true, "nvidia": true}; !cmp.Equal(want, got) {
		t.Errorf("got %v", got)
	}
	if got := parseBuiltin("kernel/drivers/char/ipmi/ipmi_devintf.ko\nkernel/lib/crc-itu-t.ko\n\n"); !got["crc_itu_t"] || !got["ipmi_devintf"] || len(got) != 2 {
		t.Errorf("builtin %v", got)
	}
}

func TestCPUVendor(t *testing.T) {
	if got := CPUVendor([]byte("processor\t: 0\nvendor_id\t: AuthenticAMD\n")); got != "AuthenticAMD" {
		t.Errorf("got %q", got)
	}
	if got := CPUVendor([]byte("processor : 0\nCPU implementer : 0x41\n")); got != "" {
		t.Errorf("got %q for an Arm cpuinfo", got)
	}
}

func TestDropInParams(t *testing.T) {
	params := []string{"isolcpus=2-3", "nohz_full=2-3"}
	if got := dropInParams(renderDropIn("cpu", params)); !slices.Equal(got, params) {
		t.Errorf("got %q", got)
	}
}
