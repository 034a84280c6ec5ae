package boot

import "testing"

// TestFramedLine: the first copy of the ramdisk's command line that arrived whole is
// read; one that a kernel message landed in is skipped, and an unfinished one waits.
func TestFramedLine(t *testing.T) {
	const cmdline = "initrd=initrd console=ttyS0 bc.token=rt_vm"
	copy := marker + cmdline + "\r\n" + endMarker + "42\r\n"
	split := marker + "initrd=initrd cons[    2.071] random: crng init done\r\nole=ttyS0 bc.token=rt_vm\r\n" + endMarker + "42\r\n"
	for name, tc := range map[string]struct {
		out  string
		want string
		ok   bool
	}{
		"whole":                         {"[    1.9] Run /init\r\n" + copy + copy, cmdline, true},
		"first copy split":              {split + copy, cmdline, true},
		"a message before the end line": {marker + cmdline + "\r\n[    2.0] usb 1-1: new device\r\n" + endMarker + "42\r\n" + copy, cmdline, true},
		"only a split copy":             {split, "", false},
		"end line not yet printed":      {marker + cmdline + "\r\n" + endMarker, "", false},
		"nothing yet":                   {"SeaBIOS\r\n", "", false},
	} {
		if got, ok := framedLine(tc.out); got != tc.want || ok != tc.ok {
			t.Errorf("%s: %q, %v; want %q, %v", name, got, ok, tc.want, tc.ok)
		}
	}
}
