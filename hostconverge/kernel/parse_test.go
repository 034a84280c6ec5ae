package kernel

import (
	"slices"
	"strings"
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

func TestRanges(t *testing.T) {
	all := make([]int, hostunit.MaxCPU+1)
	for i := range all {
		all[i] = i
	}
	tests := map[string]struct {
		in   string
		want []int
		err  string
	}{
		"list":          {"0-3,8,10-11\n", []int{0, 1, 2, 3, 8, 10, 11}, ""},
		"single":        {"0", []int{0}, ""},
		"none":          {"\n", nil, ""},
		"highest":       {"8190-8191", []int{8190, 8191}, ""},
		"backward":      {"3-1", nil, `the range "3-1" does not ascend`},
		"word":          {"a-b", nil, `"a-b" is not a CPU number`},
		"negative":      {"-1", nil, `"-1" is not a CPU number`},
		"beyond":        {"8192", nil, "8192 is beyond the highest CPU number, 8191"},
		"largest int":   {"9223372036854775807", nil, "9223372036854775807 is beyond the highest CPU number"},
		"to largest":    {"0-9223372036854775807", nil, "9223372036854775807 is beyond the highest CPU number"},
		"all":           {"0-8191", all, ""},
		"all twice":     {"0-8191,0-8191", nil, "ascending order without overlaps"},
		"one too many":  {"0-8191,5", nil, "ascending order without overlaps"},
		"many repeated": {strings.Repeat("0-4095,", 3) + "0", nil, "ascending order without overlaps"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := hostunit.ParseCPURanges(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
			if len(got) > 0 && FormatRanges(got) != strings.TrimSpace(tc.in) {
				t.Errorf("FormatRanges = %q, want %q", FormatRanges(got), strings.TrimSpace(tc.in))
			}
		})
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
